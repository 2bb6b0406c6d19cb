#include "magnet/power/thread_clock.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <set>

namespace magnet::power {

helper_clock::~helper_clock() {
  for (auto& [vm, threads] : vms_)
    for (auto& [tid, t] : threads) close_file(t);
}

void helper_clock::close_file(thread_state& t) {
  if (t.fd < 0) return;
  ::close(t.fd);
  t.fd = -1;
  --open_;
}

void helper_clock::set_threads(uint32_t vm, const std::vector<helper_thread>& threads) {
  auto& known = vms_[vm];
  totals_.try_emplace(vm);
  std::set<pid_t> now;
  for (const auto& h : threads) {
    now.insert(h.tid);
    known[h.tid].role = h.role;  // a thread renamed keeps its baseline
  }
  for (auto it = known.begin(); it != known.end();) {
    if (now.count(it->first)) {
      ++it;
      continue;
    }
    close_file(it->second);
    it = known.erase(it);
  }
}

void helper_clock::forget(uint32_t vm) {
  if (auto it = vms_.find(vm); it != vms_.end()) {
    for (auto& [tid, t] : it->second) close_file(t);
    vms_.erase(it);
  }
  totals_.erase(vm);
}

bool helper_clock::sample(pid_t tid, thread_state& t, uint64_t& ns) {
  if (t.fd < 0) {
    const std::string path = proc_ + "/" + std::to_string(tid) + "/schedstat";
    t.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (t.fd < 0) return false;
    ++open_;
  }
  char buf[96];
  const ssize_t n = ::pread(t.fd, buf, sizeof buf, 0);
  // Kept open while there is room; a file of a thread that has ended is
  // closed (its next reading, if the registry still lists it, opens anew).
  const bool ok = n > 0 && std::from_chars(buf, buf + n, ns).ec == std::errc{};
  if (!ok || open_ > max_open_) close_file(t);
  return ok;
}

const std::map<uint32_t, helper_times>& helper_clock::read() {
  reading_ = 0;
  for (auto& [vm, threads] : vms_) {
    helper_times& sum = totals_[vm];
    for (auto& [tid, t] : threads) {
      uint64_t ns = 0;
      if (!sample(tid, t, ns)) {
        t.have = false;
        continue;
      }
      ++reading_;
      if (t.have && ns >= t.last_ns) (t.role == helper_role::vhost ? sum.vhost_ns : sum.io_ns) += ns - t.last_ns;
      t.have = true;
      t.last_ns = ns;
    }
  }
  return totals_;
}

}  // namespace magnet::power
