// magnet-adversary: a hostile guest for the isolation tests, run inside a
// lab VM (it opens AF_VSOCK sockets: never on a machine whose vsock is its
// own hypervisor's).  Each mode tries one thing against the host daemon's
// vsock port and prints one JSON line saying what the host did.
//
//   magnet-adversary MODE [--cid C] [--port P] [--unprivileged-port] [args]
//     (connects from a source port below 1024, as the guest's root does;
//     --unprivileged-port: from one the kernel picks, as any user can)
//     forged-hello NAME UUID  hello naming another VM, subscribe to every
//                             stat and to events; prints what arrives
//     malformed               bytes that are no frame
//     oversize                a header announcing a body of 1 MiB
//     truncated               half a frame, then silence
//     byte-at-a-time MS       a valid subscribe, one byte every MS ms
//     never-read SECONDS      subscribe every 20 ms (with events), never read
//     churn N                 N connects and disconnects, as fast as it can
//     flood                   pings as fast as it can
//     watch SECONDS PERIOD    a well-behaved session: frames, the longest
//                             gap between them and the 99th percentile gap
#include <linux/vm_sockets.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "magnet/event.h"
#include "magnet/reserved_port.h"
#include "magnet/view_codec.h"

namespace {

using namespace magnet;

uint32_t g_cid = VMADDR_CID_HOST, g_port = MAGNET_VIEW_VSOCK_PORT;
bool g_privileged = true;

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

int dial() {
  int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  if (g_privileged)
    if (auto p = bind_reserved_vsock_port(fd); !p) {
      close(fd);
      return -p.err().code;
    }
  sockaddr_vm sa{};
  sa.svm_family = AF_VSOCK;
  sa.svm_cid = g_cid;
  sa.svm_port = g_port;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

bool send_all(int fd, const std::vector<uint8_t>& b) {
  size_t off = 0;
  while (off < b.size()) {
    ssize_t n = send(fd, b.data() + off, b.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::vector<uint8_t> frame(const view::message& m, uint32_t seq = 1) {
  std::vector<uint8_t> b;
  (void)view::encode(b, m, seq, now_ns());
  return b;
}

// Reads frames until the peer closes or @ms pass; collects them.
struct outcome {
  std::vector<view::frame> frames;
  bool closed = false;
  double closed_after_s = -1;
};
outcome read_for(int fd, int ms) {
  outcome o;
  view::reader rd;
  const uint64_t start = now_ns(), end = start + static_cast<uint64_t>(ms) * 1'000'000;
  while (now_ns() < end) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>((end - now_ns()) / 1'000'000);
    if (poll(&p, 1, std::max(left, 1)) <= 0) continue;
    auto room = rd.prepare();
    ssize_t n = recv(fd, room.data(), room.size(), 0);
    if (n <= 0) {
      o.closed = true;
      o.closed_after_s = static_cast<double>(now_ns() - start) / 1e9;
      break;
    }
    rd.commit(static_cast<size_t>(n));
    view::frame f;
    error e;
    while (rd.next(f, e) == view::reader::state::frame) o.frames.push_back(std::move(f));
  }
  return o;
}

std::string errors_json(const outcome& o) {
  std::string s = "[";
  for (const auto& f : o.frames)
    if (auto* e = std::get_if<view::errmsg>(&f.m)) {
      std::string t;
      for (char c : e->text) t += (c == '"' || c == '\\' || c < 0x20) ? '?' : c;
      s += (s.size() > 1 ? "," : "") + std::string("{\"code\":") + std::to_string(e->code) +
           ",\"text\":\"" + t + "\"}";
    }
  return s + "]";
}

void report(const char* mode, const outcome& o, const std::string& extra = "") {
  std::printf("{\"mode\":\"%s\",\"closed\":%s,\"closed_after_s\":%.3f,\"frames\":%zu,\"errors\":%s%s}\n",
              mode, o.closed ? "true" : "false", o.closed_after_s, o.frames.size(),
              errors_json(o).c_str(), extra.c_str());
}

int fail_dial(const char* mode, int e) {
  std::printf("{\"mode\":\"%s\",\"connect_error\":\"%s\"}\n", mode, std::strerror(-e));
  return 1;
}

int forged_hello(const std::string& name, const std::string& uuid) {
  int fd = dial();
  if (fd < 0) return fail_dial("forged-hello", fd);
  std::string label = "vm=" + name + " uuid=" + uuid;
  label.resize(std::min<size_t>(label.size(), MAGNET_VIEW_MAX_LABEL));
  send_all(fd, frame(view::hello{1, 1, MAGNET_VROLE_AGENT, 0, label}));
  send_all(fd, frame(view::subscribe{100, MAGNET_VMODE_PERIODIC, MAGNET_VSUB_EVENTS, {}, {}}, 2));
  auto o = read_for(fd, 3000);
  close(fd);
  // What this connection was given: its session, its values, its records' VMs.
  std::map<std::string, double> vals;
  std::string session;
  std::map<uint32_t, uint64_t> record_vms;
  for (const auto& f : o.frames) {
    if (auto* w = std::get_if<view::welcome>(&f.m)) {
      char b[24];
      std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(w->session_id));
      session = b;
    } else if (auto* s = std::get_if<view::stats>(&f.m)) {
      for (const auto& v : s->values)
        if (v.valid() && v.index == 0)
          if (auto* i = view::find_stat(v.id)) vals[std::string(i->name)] = v.value;
    } else if (auto* e = std::get_if<view::events>(&f.m)) {
      for (size_t off = 0; off + sizeof(magnet_hdr) <= e->records.size();) {
        magnet_hdr h;
        std::memcpy(&h, e->records.data() + off, sizeof h);
        if (h.len < sizeof h) break;  // the codec checked this; never loop on it
        record_vms[h.vm_id]++;
        off += h.len;
      }
    }
  }
  std::string extra = ",\"session\":\"" + session + "\",\"values\":{";
  bool first = true;
  for (const auto& [k, v] : vals) {
    char b[64];
    std::snprintf(b, sizeof b, "%.6g", v);
    extra += (first ? "\"" : ",\"") + k + "\":" + b;
    first = false;
  }
  extra += "},\"record_vms\":{";
  first = true;
  for (const auto& [vm, n] : record_vms) {
    extra += (first ? "\"" : ",\"") + std::to_string(vm) + "\":" + std::to_string(n);
    first = false;
  }
  extra += "}";
  report("forged-hello", o, extra);
  return 0;
}

int raw(const char* mode, const std::vector<uint8_t>& bytes, int wait_ms) {
  int fd = dial();
  if (fd < 0) return fail_dial(mode, fd);
  send_all(fd, frame(view::hello{}));
  send_all(fd, bytes);
  auto o = read_for(fd, wait_ms);
  close(fd);
  report(mode, o);
  return 0;
}

int byte_at_a_time(int ms) {
  int fd = dial();
  if (fd < 0) return fail_dial("byte-at-a-time", fd);
  send_all(fd, frame(view::hello{}));
  auto b = frame(view::subscribe{100, MAGNET_VMODE_PERIODIC, 0, {1, 2, 3, 4, 5, 6, 7, 8}, {}}, 2);
  size_t sent = 0;
  outcome o;
  for (; sent < b.size(); ++sent) {
    if (send(fd, &b[sent], 1, MSG_NOSIGNAL) != 1) break;
    auto part = read_for(fd, ms);
    for (auto& f : part.frames) o.frames.push_back(std::move(f));
    if (part.closed) {
      o.closed = true;
      break;
    }
  }
  close(fd);
  report("byte-at-a-time", o, ",\"bytes_sent\":" + std::to_string(sent) + ",\"frame_bytes\":" +
                                  std::to_string(b.size()));
  return 0;
}

int never_read(int seconds) {
  int fd = dial();
  if (fd < 0) return fail_dial("never-read", fd);
  int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  send_all(fd, frame(view::hello{}));
  send_all(fd, frame(view::subscribe{20, MAGNET_VMODE_PERIODIC, MAGNET_VSUB_EVENTS, {}, {}}, 2));
  // Never read; see whether the host gives up on this connection.
  const uint64_t end = now_ns() + static_cast<uint64_t>(seconds) * 1'000'000'000;
  bool closed = false;
  double after = -1;
  const uint64_t start = now_ns();
  while (now_ns() < end && !closed) {
    pollfd p{fd, POLLRDHUP | POLLHUP, 0};
    if (poll(&p, 1, 200) > 0 && (p.revents & (POLLRDHUP | POLLHUP))) {
      closed = true;
      after = static_cast<double>(now_ns() - start) / 1e9;
    }
  }
  close(fd);
  std::printf("{\"mode\":\"never-read\",\"closed\":%s,\"closed_after_s\":%.3f}\n",
              closed ? "true" : "false", after);
  return 0;
}

int churn(int n) {
  int ok = 0, refused = 0;
  const uint64_t start = now_ns();
  for (int i = 0; i < n; ++i) {
    int fd = dial();
    if (fd >= 0) {
      ++ok;
      close(fd);
    } else {
      ++refused;
    }
  }
  std::printf("{\"mode\":\"churn\",\"connected\":%d,\"refused\":%d,\"seconds\":%.3f}\n", ok, refused,
              static_cast<double>(now_ns() - start) / 1e9);
  return 0;
}

int flood() {
  int fd = dial();
  if (fd < 0) return fail_dial("flood", fd);
  send_all(fd, frame(view::hello{}));
  std::vector<uint8_t> many;
  for (uint32_t i = 0; i < 2000; ++i) {
    auto b = frame(view::ping{i, now_ns()}, i + 2);
    many.insert(many.end(), b.begin(), b.end());
  }
  send_all(fd, many);
  auto o = read_for(fd, 3000);
  close(fd);
  report("flood", o);
  return 0;
}

int watch(int seconds, int period_ms) {
  int fd = dial();
  if (fd < 0) return fail_dial("watch", fd);
  send_all(fd, frame(view::hello{1, 1, MAGNET_VROLE_AGENT, 0, "watch"}));
  send_all(fd, frame(view::subscribe{static_cast<uint32_t>(period_ms), MAGNET_VMODE_PERIODIC, 0,
                                     {MAGNET_STAT_TAP_TX_BPS}, {}}, 2));
  view::reader rd;
  uint64_t last = 0, max_gap = 0, frames = 0;
  std::vector<uint64_t> gaps;
  const uint64_t end = now_ns() + static_cast<uint64_t>(seconds) * 1'000'000'000;
  bool closed = false;
  while (now_ns() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    auto room = rd.prepare();
    ssize_t n = recv(fd, room.data(), room.size(), 0);
    if (n <= 0) {
      closed = true;
      break;
    }
    rd.commit(static_cast<size_t>(n));
    view::frame f;
    error e;
    while (rd.next(f, e) == view::reader::state::frame) {
      if (!std::holds_alternative<view::stats>(f.m)) continue;
      uint64_t t = now_ns();
      if (last) {
        max_gap = std::max(max_gap, t - last);
        gaps.push_back(t - last);
      }
      last = t;
      ++frames;
    }
  }
  close(fd);
  // The 99th percentile gap (nearest rank): the delivery's pace, apart
  // from single stalls of a CPU-starved guest.
  uint64_t p99 = 0;
  if (!gaps.empty()) {
    std::sort(gaps.begin(), gaps.end());
    p99 = gaps[std::min(gaps.size() - 1, (gaps.size() * 99 + 99) / 100 - 1)];
  }
  std::printf("{\"mode\":\"watch\",\"closed\":%s,\"frames\":%llu,\"max_gap_ms\":%.1f,"
              "\"p99_gap_ms\":%.1f}\n",
              closed ? "true" : "false", static_cast<unsigned long long>(frames), max_gap / 1e6,
              p99 / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if (auto u = std::find(a.begin(), a.end(), "--unprivileged-port"); u != a.end()) {
    g_privileged = false;
    a.erase(u);
  }
  for (size_t i = 0; i + 1 < a.size();) {
    if (a[i] == "--cid") {
      g_cid = static_cast<uint32_t>(std::stoul(a[i + 1]));
      a.erase(a.begin() + static_cast<long>(i), a.begin() + static_cast<long>(i) + 2);
    } else if (a[i] == "--port") {
      g_port = static_cast<uint32_t>(std::stoul(a[i + 1]));
      a.erase(a.begin() + static_cast<long>(i), a.begin() + static_cast<long>(i) + 2);
    } else {
      ++i;
    }
  }
  auto arg = [&](size_t i, const char* def) { return i < a.size() ? a[i] : std::string(def); };
  const std::string m = arg(0, "");
  if (m == "forged-hello") return forged_hello(arg(1, "g1"), arg(2, ""));
  if (m == "malformed") return raw("malformed", std::vector<uint8_t>(64, 0x41), 2000);
  if (m == "oversize") {
    auto b = frame(view::ping{1, 2}, 2);
    uint32_t big = 1u << 20;
    std::memcpy(&b[8], &big, 4);
    return raw("oversize", b, 2000);
  }
  if (m == "truncated") {
    auto b = frame(view::subscribe{100, 1, 0, {1, 2, 3}, {}}, 2);
    b.resize(b.size() / 2);
    return raw("truncated", b, 4000);
  }
  if (m == "byte-at-a-time") return byte_at_a_time(std::atoi(arg(1, "200").c_str()));
  if (m == "never-read") return never_read(std::atoi(arg(1, "15").c_str()));
  if (m == "churn") return churn(std::atoi(arg(1, "1000").c_str()));
  if (m == "flood") return flood();
  if (m == "watch") return watch(std::atoi(arg(1, "10").c_str()), std::atoi(arg(2, "100").c_str()));
  std::fprintf(stderr,
               "usage: magnet-adversary forged-hello NAME UUID | malformed | oversize | truncated |"
               " byte-at-a-time MS | never-read S | churn N | flood | watch S PERIOD_MS"
               " [--cid C] [--port P] [--unprivileged-port]\n");
  return 2;
}
