#include "magnet/capture/usdt.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "magnet/event.h"
// The skeleton names proto/ structs: include them first.
#include "usdt.skel.h"

namespace magnet {

std::string usdt_unavailable() {
  if (const char* d = getenv("MAGNET_DENY_METHODS"); d && std::strstr(d, "uprobe"))
    return "disabled by MAGNET_DENY_METHODS";
  struct stat st {};
  if (::stat("/sys/bus/event_source/devices/uprobe/type", &st) != 0)
    return "kernel built without uprobes (no uprobe PMU; CONFIG_UPROBE_EVENTS off)";
  return {};
}

// The binary must be a readable regular file: libbpf's own errors for a
// missing path or a file without ELF notes name neither clearly.
static status check_binary(const std::string& binary) {
  struct stat st {};
  if (::stat(binary.c_str(), &st) != 0)
    return error{"--usdt " + binary + ": " + std::strerror(errno), errno};
  if (!S_ISREG(st.st_mode)) return error{"--usdt " + binary + ": not a regular file", EINVAL};
  if (::access(binary.c_str(), R_OK) != 0)
    return error{"--usdt " + binary + ": " + std::strerror(errno), errno};
  return {};
}

result<std::unique_ptr<usdt_marks>> usdt_marks::attach(int ring_fd, const std::string& binary,
                                                      pid_t pid) {
  if (auto why = usdt_unavailable(); !why.empty())
    return error{"app.add cannot attach on this kernel (" + why + ")", ENOTSUP};
  if (auto st = check_binary(binary); !st) return st.err();
  std::unique_ptr<usdt_marks> m(new usdt_marks());
  m->skel_ = usdt_bpf__open();
  if (!m->skel_) return error::from_errno("opening the USDT BPF object");
  // The capture's ring: app.add records go into the same stream.
  if (int err = bpf_map__reuse_fd(m->skel_->maps.events, ring_fd); err)
    return error{std::string("sharing the ring buffer with the USDT object: ") +
                     std::strerror(-err),
                 -err};
  if (int err = usdt_bpf__load(m->skel_); err)
    return error{std::string("loading the USDT BPF object failed: ") + std::strerror(-err) +
                     " (run with -v for the verifier log)",
                 -err};
  m->link_ = bpf_program__attach_usdt(m->skel_->progs.app_add, pid, binary.c_str(), "magnet",
                                      "add", nullptr);
  if (!m->link_) {
    int err = errno;
    std::string hint = err == ENOENT ? " (no magnet:add USDT probe in it: built with MAGNET_ADD "
                                       "from <magnet/usdt.h>?)"
                                     : "";
    return error{"--usdt " + binary + (pid > 0 ? " (pid " + std::to_string(pid) + ")" : "") +
                     ": attaching magnet:add: " + std::strerror(err) + hint,
                 err};
  }
  return m;
}

usdt_marks::~usdt_marks() {
  if (link_) bpf_link__destroy(link_);
  if (skel_) usdt_bpf__destroy(skel_);
}

uint64_t usdt_marks::emitted() const {
  return __atomic_load_n(&skel_->bss->emitted, __ATOMIC_RELAXED);
}

uint64_t usdt_marks::dropped() const {
  return __atomic_load_n(&skel_->bss->dropped, __ATOMIC_RELAXED);
}

}  // namespace magnet
