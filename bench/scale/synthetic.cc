#include "synthetic.h"

#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "magnet/event.h"
#include "magnet/trace_file.h"
#include "magnet/view.h"
#include "../synthetic_vm.h"

extern char** environ;

namespace magnet::bench {
namespace {

std::string domain_xml(unsigned i) {
  char uuid[40], mac[20];
  std::snprintf(uuid, sizeof uuid, "%08x-5ca1-4e5f-8a9b-%012x", i, i * 7919);
  std::snprintf(mac, sizeof mac, "52:54:00:%02x:%02x:%02x", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff);
  const std::string n = std::to_string(i);
  return "<domain type='test'><name>scale-" + n + "</name><uuid>" + uuid +
         "</uuid><memory>1048576</memory><vcpu>2</vcpu><os><type>hvm</type></os><devices>"
         "<interface type='ethernet'><mac address='" + mac + "'/><target dev='vnet" + n +
         "'/><bandwidth><inbound average='125000'/><outbound average='125000'/></bandwidth></interface>"
         "<vsock model='virtio'><cid auto='no' address='" + std::to_string(i + 3) + "'/></vsock>"
         "<channel type='unix'><source mode='bind' path='/run/scale/" + n +
         ".view'/><target type='virtio' name='org.magnet.view.0'/></channel>"
         "</devices></domain>\n";
}


}  // namespace

std::string write_node_file(const std::string& dir, unsigned n) {
  const std::string path = dir + "/node-" + std::to_string(n) + ".xml";
  std::ofstream f(path);
  f << "<node>\n";
  for (unsigned i = 1; i <= n; ++i) f << domain_xml(i);
  f << "</node>\n";
  f.close();
  if (!f) throw std::runtime_error("cannot write the test driver's node file " + path);
  return path;
}

counter_world::counter_world(unsigned n) {
  for (uint32_t id = 1; id <= n; ++id) {
    host::vm_counters& c = counters[id];
    const uint64_t k = id;
    c.tap_tx_bytes = 123456789ull * k;
    c.tap_rx_bytes = 23456789ull * k;
    for (int v = 0; v < 2; ++v) c.vcpu_ns[v] = {1234567890ull * k, 2345678ull * k, 3456789012ull * k};
    fill_synthetic_vm(c, records[id], k);
  }
}

// One tick of a VM that sends and receives ~10 MB/s, exits ~10 k/s.
void counter_world::advance() {
  for (auto& [id, c] : counters) {
    c.tap_tx_bytes += 1'000'000 + id;
    c.tap_tx_pkts += 700;
    c.tap_rx_bytes += 1'000'000 + 2 * id;
    c.tap_rx_pkts += 800;
    c.blk_bytes += 409600;
    c.blk_reqs += 100;
    c.exits += 1000;
    for (auto& [v, ns] : c.vcpu_ns) ns = {ns[0] + 60'000'000, ns[1] + 5'000'000, ns[2] + 35'000'000};
    for (auto& [r, s] : c.reasons) {
      s.hist[12] += 50;
      s.count += 50;
      s.total_ns += 50 * 6000;
    }
    for (auto& q : c.queue) {
      q.hist[14] += 700;
      q.count += 700;
      q.total_ns += 700 * 24000;
    }
  }
}

host::exposition_input counter_world::exposition() const {
  host::exposition_input in;
  for (const auto& [id, c] : counters) {
    char uuid[40];
    std::snprintf(uuid, sizeof uuid, "%08x-5ca1-4e5f-8a9b-%012x", id, id * 7919);
    in.vms.push_back({"scale-" + std::to_string(id), uuid, id, &c, &records.at(id)});
  }
  in.records = 123456789;
  in.lost = 42;
  in.resident_bytes = 64 << 20;
  in.libvirt_connected = true;
  return in;
}

std::vector<uint8_t> tick_records(unsigned n, unsigned per_vm, uint32_t link_ifindex, uint64_t now_ns) {
  std::vector<uint8_t> out;
  for (uint32_t id = 1; id <= n; ++id)
    for (unsigned j = 0; j < per_vm; ++j) {
      magnet_hdr h{};
      h.ts_ns = now_ns + j;
      h.vm_id = id;
      h.size = 1500;
      h.type = j % 2 ? MAGNET_EV_VMNET_QUEUE_RX : MAGNET_EV_VMNET_QUEUE_TX;
      magnet_vmnet_queue q{};
      q.delay_ns = 20'000 + 1'000 * ((id + j) % 50);
      q.in_ifindex = 100 + id;
      q.out_ifindex = j % 2 ? 100 + id : link_ifindex;
      auto r = make_record(h, q);
      out.insert(out.end(), r.begin(), r.end());
    }
  return out;
}

extra_processes::extra_processes(unsigned n) {
  char sleep_path[] = "/bin/sleep", arg[] = "3600";
  char* argv[] = {sleep_path, arg, nullptr};
  for (unsigned i = 0; i < n; ++i) {
    pid_t pid;
    int e = posix_spawn(&pid, sleep_path, nullptr, nullptr, argv, environ);
    if (e != 0) {
      end_all();
      throw std::runtime_error(std::string("cannot start /bin/sleep as a stand-in process: ") + std::strerror(e));
    }
    pids_.push_back(pid);
  }
}

extra_processes::~extra_processes() { end_all(); }

void extra_processes::end_all() {
  for (pid_t p : pids_) kill(p, SIGKILL);
  for (pid_t p : pids_) waitpid(p, nullptr, 0);
  pids_.clear();
}

unsigned proc_entries() {
  unsigned n = 0;
  if (DIR* d = opendir("/proc")) {
    while (auto* e = readdir(d)) n += e->d_name[0] >= '1' && e->d_name[0] <= '9';
    closedir(d);
  }
  return n;
}

}  // namespace magnet::bench
