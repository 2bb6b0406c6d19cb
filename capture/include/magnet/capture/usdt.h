// Application marks: attaches app.add (kmod/bpf/usdt.bpf.c) to the
// magnet:add USDT probes (<magnet/usdt.h>) of one binary, writing into a
// capture's ring buffer.  A separate BPF object, so a kernel without
// uprobes loses only this.  RAII owns the skeleton and the link.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "magnet/result.h"

struct usdt_bpf;
struct bpf_link;

namespace magnet {

// Why this kernel cannot attach uprobes (and so app.add); empty when it can.
std::string usdt_unavailable();

class usdt_marks {
 public:
  // @ring_fd: the capture's ring buffer (capture::ringbuf_fd()); @pid: one
  // process, or -1 for every process that runs @binary.
  static result<std::unique_ptr<usdt_marks>> attach(int ring_fd, const std::string& binary,
                                                    pid_t pid);
  ~usdt_marks();
  usdt_marks(const usdt_marks&) = delete;
  usdt_marks& operator=(const usdt_marks&) = delete;
  uint64_t emitted() const;
  // Marks lost because the ring was full (not in the stream's lost records:
  // those count the capture object's probes).
  uint64_t dropped() const;

 private:
  usdt_marks() = default;
  usdt_bpf* skel_ = nullptr;
  bpf_link* link_ = nullptr;
};

}  // namespace magnet
