// magnet-adversary: a hostile guest for the isolation tests, run inside a
// lab VM as root (it opens AF_VSOCK sockets: never on a machine whose vsock
// is its own hypervisor's).  Each mode tries one thing against the host
// daemon and prints one JSON line saying what the host did.
//
//   magnet-adversary MODE [options] [args]: kUsage below (magnet-adversary --help)
#include <dirent.h>
#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "magnet/cli.h"
#include "magnet/event.h"
#include "magnet/events.h"
#include "magnet/reserved_port.h"
#include "magnet/view_codec.h"

namespace {

using namespace magnet;
using json = nlohmann::json;

uint32_t g_cid = VMADDR_CID_HOST, g_port = MAGNET_VIEW_VSOCK_PORT;
bool g_privileged = true;
uint32_t g_src_port = 0;  // --src-port: this source port, not the next free one of 512-1023
bool g_serial = false;
std::string g_serial_path;  // empty: the port named org.magnet.view.0

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void print(const json& j) { std::puts(j.dump(-1, '?', false, json::error_handler_t::replace).c_str()); }

int dial_vsock() {
  int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  if (g_src_port) {
    sockaddr_vm me{};
    me.svm_family = AF_VSOCK;
    me.svm_cid = VMADDR_CID_ANY;
    me.svm_port = g_src_port;
    if (bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof me) != 0) {
      int e = errno;
      close(fd);
      return -e;
    }
  } else if (g_privileged)
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

// /dev/vportNpM of the virtio-serial port named @name, or "".
std::string find_port(const std::string& name) {
  std::string found;
  if (DIR* d = opendir("/sys/class/virtio-ports")) {
    while (auto* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream f(std::string("/sys/class/virtio-ports/") + e->d_name + "/name");
      std::string n;
      std::getline(f, n);
      if (n == name) found = std::string("/dev/") + e->d_name;
    }
    closedir(d);
  }
  return found;
}

bool send_all(int fd, const std::vector<uint8_t>& b) {
  size_t off = 0;
  while (off < b.size()) {
    ssize_t n = write(fd, b.data() + off, b.size() - off);
    if (n < 0 && errno == EINTR) continue;
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

// Reads frames until the peer closes, @ms pass, or @on_frame returns false.
// True: the peer closed.
bool read_frames(int fd, int ms, view::reader& rd, const std::function<bool(view::frame&)>& on_frame) {
  const uint64_t end = now_ns() + static_cast<uint64_t>(ms) * 1'000'000;
  while (now_ns() < end) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>((end - now_ns()) / 1'000'000);
    int r = poll(&p, 1, std::max(left, 1));
    if (r <= 0) continue;
    // A virtio-serial port whose host side is gone polls POLLHUP.
    if (!(p.revents & POLLIN)) return true;
    auto room = rd.prepare();
    ssize_t n = read(fd, room.data(), room.size());
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return true;
    rd.commit(static_cast<size_t>(n));
    view::frame f;
    error e;
    for (;;) {
      auto st = rd.next(f, e);
      if (st == view::reader::state::more) break;
      if (st == view::reader::state::bad) {
        rd.resync();  // a channel's leftovers: find the next frame by its magic
        continue;
      }
      if (!on_frame(f)) return false;
    }
  }
  return false;
}

// The view channel, as chosen: a vsock connection (fd, or -errno), or the
// virtio-serial port, resynchronised (everything before the host's echo of
// a fresh token is an earlier user's).
int open_serial() {
  std::string path = g_serial_path.empty() ? find_port("org.magnet.view.0") : g_serial_path;
  if (path.empty()) return -ENOENT;
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return -errno;
  uint64_t token = 0;
  if (getrandom(&token, sizeof token, 0) != sizeof token) token = now_ns();
  view::reader rd;
  bool echoed = false;
  for (int attempt = 0; attempt < 20 && !echoed; ++attempt) {
    send_all(fd, frame(view::resync{token, false}));
    read_frames(fd, 250, rd, [&](view::frame& f) {
      auto* r = std::get_if<view::resync>(&f.m);
      echoed = r && r->reply && r->token == token;
      return !echoed;
    });
  }
  if (!echoed) {
    close(fd);
    return -ETIMEDOUT;
  }
  return fd;
}

int dial() { return g_serial ? open_serial() : dial_vsock(); }

struct outcome {
  std::vector<view::frame> frames;
  bool closed = false;
  double closed_after_s = -1;
};
outcome read_for(int fd, int ms) {
  outcome o;
  view::reader rd;
  const uint64_t start = now_ns();
  o.closed = read_frames(fd, ms, rd, [&](view::frame& f) {
    o.frames.push_back(std::move(f));
    return true;
  });
  if (o.closed) o.closed_after_s = static_cast<double>(now_ns() - start) / 1e9;
  return o;
}

json errors_json(const outcome& o) {
  json a = json::array();
  for (const auto& f : o.frames)
    if (auto* e = std::get_if<view::errmsg>(&f.m)) a.push_back({{"code", e->code}, {"text", e->text}});
  return a;
}

json report(const char* mode, const outcome& o) {
  return {{"mode", mode},
          {"closed", o.closed},
          {"closed_after_s", std::round(o.closed_after_s * 1000) / 1000},
          {"frames", o.frames.size()},
          {"errors", errors_json(o)}};
}

int fail_dial(const char* mode, int e) {
  print({{"mode", mode}, {"transport", g_serial ? "virtio-serial" : "vsock"}, {"connect_error", std::strerror(-e)}});
  return 1;
}

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
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
  json vals = json::object(), record_vms = json::object();
  std::string session;
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
        auto& n = record_vms[std::to_string(h.vm_id)];
        n = n.is_number() ? n.get<uint64_t>() + 1 : 1;
        off += h.len;
      }
    }
  }
  json r = report("forged-hello", o);
  r["session"] = session;
  r["values"] = vals;
  r["record_vms"] = record_vms;
  print(r);
  return 0;
}

// What the events mode collected: every record, equal ones counted once.
struct record_log {
  size_t max_per_type = 400;
  struct kept {
    uint64_t n = 0;
    magnet_hdr hdr{};
    std::vector<uint8_t> payload;
  };
  std::map<std::vector<uint8_t>, kept> records;  // key: the record with ts_ns zeroed
  std::map<uint16_t, uint64_t> per_type, distinct, omitted;
  std::set<std::string> strings;
  uint64_t total = 0, lost = 0, after_refusal = 0;
  bool refused_seen = false;

  void add(const uint8_t* rec, size_t len) {
    magnet_hdr h;
    std::memcpy(&h, rec, sizeof h);
    ++total;
    ++per_type[h.type];
    if (refused_seen) ++after_refusal;
    scan_strings(rec + sizeof h, len - sizeof h);
    std::vector<uint8_t> key(rec, rec + len);
    std::memset(key.data(), 0, sizeof h.ts_ns);
    auto it = records.find(key);
    if (it != records.end()) {
      ++it->second.n;
      return;
    }
    if (distinct[h.type] >= max_per_type) {
      ++omitted[h.type];
      return;
    }
    ++distinct[h.type];
    records.emplace(std::move(key), kept{1, h, std::vector<uint8_t>(rec + sizeof h, rec + len)});
  }
  // Every run of 3+ printable characters: whatever field a task name hides in.
  void scan_strings(const uint8_t* p, size_t n) {
    std::string run;
    for (size_t i = 0; i <= n; ++i) {
      if (i < n && p[i] >= 0x20 && p[i] < 0x7f) {
        run += static_cast<char>(p[i]);
        continue;
      }
      if (run.size() >= 3) strings.insert(run);
      run.clear();
    }
  }
  void add_batch(const view::events& e) {
    lost += e.lost;
    for (size_t off = 0; off + sizeof(magnet_hdr) <= e.records.size();) {
      magnet_hdr h;
      std::memcpy(&h, e.records.data() + off, sizeof h);
      if (h.len < sizeof h || off + h.len > e.records.size()) break;  // the codec checked this
      add(e.records.data() + off, h.len);
      off += h.len;
    }
  }
  json to_json() const;
};

json record_log::to_json() const {
  json types = json::object(), recs = json::array();
  for (const auto& [t, n] : per_type) {
    auto d = distinct.find(t);
    auto o = omitted.find(t);
    types[event_name(t)] = {{"type", t}, {"records", n}, {"distinct", d == distinct.end() ? 0 : d->second},
                            {"omitted", o == omitted.end() ? 0 : o->second}};
  }
  for (const auto& [key, k] : records)
    recs.push_back({{"type", k.hdr.type},
                    {"name", event_name(k.hdr.type)},
                    {"n", k.n},
                    {"vm_id", k.hdr.vm_id},
                    {"tgid", k.hdr.tgid},
                    {"tid", k.hdr.tid},
                    {"cpu", k.hdr.cpu},
                    {"abstract_id", hex(reinterpret_cast<const uint8_t*>(&k.hdr.abstract_id), 8)},
                    {"payload", hex(k.payload.data(), k.payload.size())}});
  return {{"records_total", total}, {"records_after_refusal", after_refusal}, {"lost", lost},
          {"types", types}, {"records", recs}, {"strings", strings}};
}

// A guest root speaking the view protocol itself: every event type, then a
// subscription naming host-only types halfway.
int events_mode(int seconds, size_t max_per_type) {
  const char* transport = g_serial ? "virtio-serial" : "vsock";
  int fd = dial();
  if (fd < 0) return fail_dial("events", fd);
  send_all(fd, frame(view::hello{MAGNET_VIEW_VERSION_MIN, MAGNET_VIEW_VERSION, MAGNET_VROLE_AGENT, 0, "adversary"}));
  send_all(fd, frame(view::subscribe{1000, MAGNET_VMODE_PERIODIC, MAGNET_VSUB_EVENTS, {}, {}}, 2));
  record_log log;
  log.max_per_type = max_per_type;
  json errors = json::array();
  std::string session;
  uint64_t stats_frames = 0, stats_after_refusal = 0;
  view::reader rd;
  auto on_frame = [&](view::frame& f) {
    if (auto* w = std::get_if<view::welcome>(&f.m)) {
      char b[24];
      std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(w->session_id));
      session = b;
    } else if (auto* e = std::get_if<view::events>(&f.m)) {
      log.add_batch(*e);
    } else if (std::holds_alternative<view::stats>(f.m)) {
      ++stats_frames;
      if (log.refused_seen) ++stats_after_refusal;
    } else if (auto* x = std::get_if<view::errmsg>(&f.m)) {
      errors.push_back({{"code", x->code}, {"text", x->text}});
      if (x->code == MAGNET_VERR_BAD_SUBSCRIBE) log.refused_seen = true;
    }
    return true;
  };
  const int half = seconds * 500;
  bool closed = read_frames(fd, half, rd, on_frame);
  if (!closed) {
    send_all(fd, frame(view::subscribe{1000, MAGNET_VMODE_PERIODIC, MAGNET_VSUB_EVENTS, {},
                                       {MAGNET_EV_PROC_FORK, MAGNET_EV_NET_L4_SEND}}, 3));
    closed = read_frames(fd, seconds * 1000 - half, rd, on_frame);
  }
  close(fd);
  json r = log.to_json();
  r["mode"] = "events";
  r["transport"] = transport;
  r["seconds"] = seconds;
  r["session"] = session;
  r["closed"] = closed;
  r["errors"] = errors;
  r["stats_frames"] = stats_frames;
  r["stats_after_refusal"] = stats_after_refusal;
  print(r);
  return 0;
}

int raw(const char* mode, const std::vector<uint8_t>& bytes, int wait_ms) {
  int fd = dial();
  if (fd < 0) return fail_dial(mode, fd);
  send_all(fd, frame(view::hello{}));
  send_all(fd, bytes);
  auto o = read_for(fd, wait_ms);
  close(fd);
  print(report(mode, o));
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
    if (write(fd, &b[sent], 1) != 1) break;
    auto part = read_for(fd, ms);
    for (auto& f : part.frames) o.frames.push_back(std::move(f));
    if (part.closed) {
      o.closed = true;
      break;
    }
  }
  close(fd);
  json r = report("byte-at-a-time", o);
  r["bytes_sent"] = sent;
  r["frame_bytes"] = b.size();
  print(r);
  return 0;
}

// @rcvbuf > 0: SO_RCVBUF set to it first (0: the socket's own).
int never_read(int seconds, int rcvbuf) {
  int fd = dial();
  if (fd < 0) return fail_dial("never-read", fd);
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  send_all(fd, frame(view::hello{}));
  send_all(fd, frame(view::subscribe{20, MAGNET_VMODE_PERIODIC, MAGNET_VSUB_EVENTS, {}, {}}, 2));
  // Never read; see whether the host gives up on this connection.
  const uint64_t start = now_ns(), end = start + static_cast<uint64_t>(seconds) * 1'000'000'000;
  bool closed = false;
  double after = -1;
  while (now_ns() < end && !closed) {
    pollfd p{fd, POLLRDHUP | POLLHUP, 0};
    if (poll(&p, 1, 200) > 0 && (p.revents & (POLLRDHUP | POLLHUP))) {
      closed = true;
      after = static_cast<double>(now_ns() - start) / 1e9;
    }
  }
  close(fd);
  print({{"mode", "never-read"}, {"closed", closed}, {"closed_after_s", std::round(after * 1000) / 1000}});
  return 0;
}

int churn(int n) {
  int ok = 0, refused = 0;
  const uint64_t start = now_ns();
  for (int i = 0; i < n; ++i) {
    int fd = dial_vsock();
    if (fd >= 0) {
      ++ok;
      close(fd);
    } else {
      ++refused;
    }
  }
  print({{"mode", "churn"},
         {"connected", ok},
         {"refused", refused},
         {"seconds", std::round(static_cast<double>(now_ns() - start) / 1e6) / 1e3}});
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
  print(report("flood", o));
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
  bool closed = read_frames(fd, seconds * 1000, rd, [&](view::frame& f) {
    if (!std::holds_alternative<view::stats>(f.m)) return true;
    uint64_t t = now_ns();
    if (last) {
      max_gap = std::max(max_gap, t - last);
      gaps.push_back(t - last);
    }
    last = t;
    ++frames;
    return true;
  });
  close(fd);
  // The 99th percentile gap (nearest rank): the delivery's pace, apart
  // from single stalls of a CPU-starved guest.
  uint64_t p99 = 0;
  if (!gaps.empty()) {
    std::sort(gaps.begin(), gaps.end());
    p99 = gaps[std::min(gaps.size() - 1, (gaps.size() * 99 + 99) / 100 - 1)];
  }
  print({{"mode", "watch"},
         {"closed", closed},
         {"frames", frames},
         {"max_gap_ms", std::round(max_gap / 1e5) / 10},
         {"p99_gap_ms", std::round(p99 / 1e5) / 10}});
  return 0;
}

// Removes "--NAME VALUE" from @a; VALUE, or @def if absent.
std::string take_option(std::vector<std::string>& a, const std::string& name, const std::string& def) {
  for (size_t i = 0; i + 1 < a.size(); ++i)
    if (a[i] == name) {
      std::string v = a[i + 1];
      a.erase(a.begin() + static_cast<long>(i), a.begin() + static_cast<long>(i) + 2);
      return v;
    }
  return def;
}

bool take_flag(std::vector<std::string>& a, const std::string& name) {
  auto u = std::find(a.begin(), a.end(), name);
  if (u == a.end()) return false;
  a.erase(u);
  return true;
}

const char* kUsage =
    "usage: magnet-adversary MODE [--cid C] [--port P] [--src-port P] [--unprivileged-port]\n"
    "                        [--serial [PATH]] [args]\n"
    "    (vsock by default, from a source port below 1024, as the guest's root\n"
    "    does; --unprivileged-port: from one the kernel picks, as any user\n"
    "    can; --serial: the VM's virtio-serial view channel instead, PATH or\n"
    "    the port named org.magnet.view.0; the guest's own agent holds that\n"
    "    channel and must be stopped first)\n"
    "    forged-hello NAME UUID  hello naming another VM, subscribe to every\n"
    "                            stat and to events; prints what arrives\n"
    "    events T [MAX]          speaks the protocol itself: subscribes to\n"
    "                            every event type (an empty list), and halfway\n"
    "                            asks for host-only types (proc.fork,\n"
    "                            net.l4.send), which must be refused by name\n"
    "                            while the session goes on; prints every record\n"
    "                            received (equal ones once with a count, the\n"
    "                            header's time stamp aside; at most MAX, 400,\n"
    "                            different ones per type) and every string of\n"
    "                            3+ printable characters in any payload\n"
    "    malformed               bytes that are no frame\n"
    "    oversize                a header announcing a body of 1 MiB\n"
    "    truncated               half a frame, then silence\n"
    "    byte-at-a-time T        a valid subscribe, one byte every T\n"
    "    never-read T [RCVBUF]   subscribe every 20 ms (with events), for T, never\n"
    "                            read (SO_RCVBUF RCVBUF first, 4096; 0: not set)\n"
    "    churn N                 N connects and disconnects, as fast as it can\n"
    "    flood                   pings as fast as it can\n"
    "    watch T PERIOD          a well-behaved session for T, frames every\n"
    "                            PERIOD: frames, the longest gap between them\n"
    "                            and the 99th percentile gap\n"
    "    -h, --help              this text\n"
    "T, PERIOD: a duration, a number and a unit (ns, us, ms, s, min): 500ms,\n"
    "2.5s, 1min; a bare number is seconds for T; PERIOD and byte-at-a-time's T\n"
    "took milliseconds and need their unit.\n";

// A mode's duration argument in whole units of @unit_ns (magnet/cli.h's syntax).
int whole(const std::string& what, const std::string& v, uint64_t unit_ns, cli::bare_number bare) {
  const uint64_t ns = cli::need(cli::parse_duration_ns(v, bare), what);
  if (ns % unit_ns || ns / unit_ns > 1'000'000)
    throw cli::usage_error(what + ": '" + v + "' is not a whole number of " +
                           (unit_ns == 1'000'000'000 ? "seconds" : "milliseconds") + " up to 1000000");
  return static_cast<int>(ns / unit_ns);
}
int secs(const std::string& what, const std::string& v) {
  return whole(what, v, 1'000'000'000, cli::bare_number::seconds);
}
int millis(const std::string& what, const std::string& v) {
  return whole(what, v, 1'000'000, cli::bare_number::refused);
}

int run(std::vector<std::string> a) {
  if (take_flag(a, "--help") || take_flag(a, "-h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  g_privileged = !take_flag(a, "--unprivileged-port");
  if (auto s = std::find(a.begin(), a.end(), "--serial"); s != a.end()) {
    g_serial = true;
    if (s + 1 != a.end() && (s + 1)->rfind("/", 0) == 0) {
      g_serial_path = *(s + 1);
      a.erase(s + 1);
    }
    a.erase(std::find(a.begin(), a.end(), "--serial"));
  }
  g_cid = static_cast<uint32_t>(std::stoul(take_option(a, "--cid", std::to_string(g_cid))));
  g_port = static_cast<uint32_t>(std::stoul(take_option(a, "--port", std::to_string(g_port))));
  g_src_port = static_cast<uint32_t>(std::stoul(take_option(a, "--src-port", "0")));
  auto arg = [&](size_t i, const char* def) { return i < a.size() ? a[i] : std::string(def); };
  const std::string m = arg(0, "");
  if (m == "forged-hello") return forged_hello(arg(1, "g1"), arg(2, ""));
  if (m == "events")
    return events_mode(secs("events T", arg(1, "5")), static_cast<size_t>(std::atoi(arg(2, "400").c_str())));
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
  if (m == "byte-at-a-time") return byte_at_a_time(millis("byte-at-a-time T", arg(1, "200ms")));
  if (m == "never-read") return never_read(secs("never-read T", arg(1, "15")), std::atoi(arg(2, "4096").c_str()));
  if (m == "churn") return churn(std::atoi(arg(1, "1000").c_str()));
  if (m == "flood") return flood();
  if (m == "watch") return watch(secs("watch T", arg(1, "10")), millis("watch PERIOD", arg(2, "100ms")));
  std::fprintf(stderr, "magnet-adversary: %s\n%s",
               m.empty() ? "no MODE" : ("unknown mode '" + m + "'").c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);  // a peer that closes is an outcome, not a death
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {  // std::stoul of a --cid/--port that is no number
    std::fprintf(stderr, "magnet-adversary: bad argument: %s\n", e.what());
    return 2;
  }
}
