// The capture core: probes the running kernel, picks an attach method per
// probe, loads the BPF object once and attaches/detaches probes, sampling
// and filters at run time without reloading.  RAII owns the skeleton, the
// links and the per-netns netfilter links.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "magnet/control.h"
#include "magnet/capture/latency.h"
#include "magnet/result.h"
#include "magnet/capture/consumer.h"

struct capture_bpf;
struct bpf_link;
struct bpf_program;

namespace magnet {

enum class method { tp_btf, raw_tp, tracepoint, netfilter, cgroup_skb, fentry, kprobe };
std::string_view method_name(method m);

struct method_spec {
  method kind;
  std::vector<const char*> progs;  // program names in capture.bpf.c
  const char* target;              // "cat/tracepoint", kernel function, or hook name
  int hook = -1;                   // netfilter hook / cgroup attach (0 ingress, 1 egress)
};

struct probe_spec {
  int slot;
  uint16_t type;
  const char* layer;
  const char* description;
  std::vector<method_spec> methods;  // in order of preference
  // Probes whose programs keep state this one reads: attached (without
  // records of their own unless enabled) whenever this one is.
  std::vector<uint16_t> needs = {};
};

const std::vector<probe_spec>& probe_table();
const probe_spec* find_probe(uint16_t type);

struct method_check {
  method kind;
  bool ok;
  std::string why;  // why it cannot attach here (empty when ok)
};

struct probe_plan {
  const probe_spec* spec;
  int chosen = -1;  // index into spec->methods, -1 = cannot attach here
  std::vector<method_check> checks;
};

// What the running kernel allows, probed once.  MAGNET_DENY_METHODS
// (comma-separated method names) removes methods, to exercise fallbacks.
class kernel_features {
 public:
  static kernel_features probe();
  method_check check(const method_spec& m) const;
  const std::string& cgroup2_path() const { return cgroup2_; }
  // bpf_rdonly_cast(p, 0) yields readable memory (6.17+): the packet
  // probes then copy headers with plain loads instead of
  // bpf_probe_read_kernel.  MAGNET_DENY_METHODS=rdonly_mem turns it off.
  bool rdonly_mem() const { return rdonly_mem_; }

 private:
  bool has_btf_ = false, fentry_ok_ = false, kprobe_pmu_ = false, netfilter_ok_ = false;
  bool rdonly_mem_ = false;
  std::string fentry_why_, netfilter_why_, cgroup2_, tracefs_;
  std::set<std::string> deny_;
  std::shared_ptr<void> btf_;  // struct btf*, freed with btf__free
};

std::vector<probe_plan> plan_probes(const kernel_features& kf);

// BPF_LINK_CREATE for a netfilter program in the caller's network
// namespace (libbpf 1.1 lacks it); returns the link fd or -errno.
int netfilter_link_create(int prog_fd, int pf, int hook, int priority);

// Names the missing capability, or empty if the process may load probes.
std::string missing_capabilities();

struct capture_options {
  std::set<uint16_t> probes;         // probes to load (empty = every one that can attach)
  size_t ring_bytes = 16u << 20;     // power of two, >= 4096
  uint64_t wakeup_watermark = 0;     // 0 = ring_bytes / 8
  // net.pkt.*: bytes kept of each frame, 1..MAGNET_SNAP_MAX (tcpdump -s).
  size_t snap_bytes = 96;
  // net.pkt.*: only this device (ifindex in the network namespace whose
  // inode is snap_netns_ino), as tcpdump -i; 0 = every device.
  uint32_t snap_ifindex = 0, snap_netns_ino = 0;
};

class capture : public drop_source {
 public:
  static result<std::unique_ptr<capture>> open(const capture_options& opt);
  ~capture() override;
  capture(const capture&) = delete;
  capture& operator=(const capture&) = delete;

  const std::vector<probe_plan>& plans() const { return plans_; }
  const probe_plan* plan_for(uint16_t type) const;

  // mode = MAGNET_MODE_STREAM | MAGNET_MODE_AGGREGATE; 0 disables (and
  // detaches, so a disabled probe costs nothing).
  status set_mode(uint16_t type, uint32_t mode);
  // Disables the probes of @types at the end of a capture: every mode is
  // zeroed first, a probe before the probes it needs, then what no enabled
  // probe needs is detached.  Zeroed one by one in any other order, a needed
  // probe (kvm.exit) could stop recording while its program still keeps
  // the state a dependent (kvm.entry) then records: an exit -> entry time
  // whose exit is in no record.
  void stop(const std::set<uint16_t>& types);
  void set_sampling(uint16_t type, uint32_t every, uint64_t interval_ns);
  // Writes a probe's mode without attaching it (BPF_PROG_TEST_RUN tests
  // drive the programs directly).
  void arm(uint16_t type, uint32_t mode);
  int program_fd(const char* name) const;
  status set_filter_sets(uint32_t active, const std::set<uint32_t>& cpus,
                         const std::set<uint32_t>& tgids, const std::set<uint64_t>& cgroups,
                         const std::set<uint32_t>& vms, const std::set<uint64_t>& ids);
  // VM tagging maps (written by the host registry).
  status tag_vm_tgid(uint32_t tgid, uint32_t vm);
  // A device is (network namespace, ifindex): an ifindex is unique only
  // within its namespace.  This one means a device in the network namespace
  // this capture was opened in (netns_ino()).
  status tag_vm_ifindex(uint32_t ifindex, uint32_t vm);
  // A device in the namespace whose nsfs inode (stat of /proc/PID/ns/net or
  // /run/netns/NAME) is @netns_ino; 0 is refused (EINVAL).
  status tag_vm_ifindex(uint32_t netns_ino, uint32_t ifindex, uint32_t vm);
  status tag_vm_cgroup(uint64_t cgroup_id, uint32_t vm);
  status untag_vm(uint32_t vm);

  // Netfilter hooks are per network namespace: attach in any new one.
  void rescan_netns();
  // The inode of the network namespace this capture was opened in.
  uint32_t netns_ino() const { return netns_ino_; }

  int ringbuf_fd() const;
  size_t ring_bytes() const { return ring_bytes_; }
  uint64_t total_dropped() const override;
  // Per-CPU state of a probe slot.
  std::vector<magnet_probe_pcpu> probe_state(int slot) const override;
  uint64_t drop_ack(int slot, int cpu) const override;
  void set_drop_ack(int slot, int cpu, uint64_t v) override;
  // In-kernel aggregation, summed over CPUs: [vm] -> {events, bytes}.
  std::map<uint32_t, magnet_agg> aggregate(int slot) const;
  // The same for the given VM ids only (one lookup each, not one per id).
  std::map<uint32_t, magnet_agg> aggregate(int slot, const std::vector<uint32_t>& vms) const;
  int ncpus() const override { return ncpus_; }
  std::map<uint32_t, uint64_t> vm_quota_lost() const override;
  // The per-VM stream quota (magnet_filter_ctl.vm_cost_ns): at most
  // @per_second events of one VM per CPU onto the stream on average, in
  // bursts of up to @burst_s seconds' worth.  0 turns it off.
  void set_vm_quota(double per_second, double burst_s);
  // Each VM's lost records, summed over CPUs: [vm] -> {quota, ring full}
  // (the given VM ids; VMs that lost nothing are absent).
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> vm_losses(const std::vector<uint32_t>& vms) const;
  std::string attach_summary() const;
  // Whether a probe's programs are attached (enabled, or needed by one).
  bool attached(uint16_t type) const;
  // In-kernel latency statistics, summed over CPUs (latency.h).
  std::vector<std::pair<magnet_kvm_exit_key, lat_stat>> kvm_exit_stats() const;
  std::vector<std::pair<magnet_vmnet_queue_key, lat_stat>> vmnet_queue_stats() const;

 private:
  capture() = default;
  status attach(const probe_plan& p);
  void detach(int slot);
  void release(int slot);
  status attach_netfilter_all(const probe_plan& p);

  capture_bpf* skel_ = nullptr;
  std::vector<probe_plan> plans_;
  kernel_features kf_;
  std::map<int, std::vector<bpf_link*>> links_;  // slot -> links
  struct nf_link {
    int slot;
    uint64_t netns_ino;
    int fd;
  };
  std::vector<nf_link> nf_links_;
  int cgroup_fd_ = -1;
  uint32_t netns_ino_ = 0;
  size_t ring_bytes_ = 0;
  int ncpus_ = 0;
};

}  // namespace magnet
