#include "magnet/agent/agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/vm_sockets.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <utility>  // before asio: Boost 1.74 forgets it for C++20

#include <boost/asio.hpp>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <thread>

#include "magnet/capture/capture.h"
#include "magnet/capture/consumer.h"
#include "magnet/agent/journey.h"
#include "magnet/log.h"
#include "magnet/events.h"
#include "magnet/reserved_port.h"
#include "magnet/view_server.h"

namespace magnet::guest {

namespace asio = boost::asio;
using gproto = asio::generic::stream_protocol;
using gsock = gproto::socket;
using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;
using magnet::log_line;

namespace {

uint64_t now_ns() { return view::monotonic_now_ns(); }

uint64_t random64() {
  uint64_t v = 0;
  while (getrandom(&v, sizeof v, 0) != sizeof v) {
  }
  return v;
}

void log_sink(severity level, const std::string& line) { log_line(level, line); }

// This guest's vsock CID, or 0 when it has no vsock device.
uint32_t local_cid() {
  int fd = open("/dev/vsock", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  unsigned int cid = VMADDR_CID_ANY;
  int r = ioctl(fd, IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid);
  close(fd);
  return r == 0 && cid != VMADDR_CID_ANY && cid > VMADDR_CID_HOST ? cid : 0;
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

// The guest probes: the kernel's socket and device layers, counted in
// kernel; socket sends and device transmits also streamed for the journey.
const uint16_t kGuestProbes[] = {MAGNET_EV_NET_SOCK_SEND, MAGNET_EV_NET_SOCK_RECV,
                                 MAGNET_EV_NET_DEV_XMIT, MAGNET_EV_NET_DEV_RECV};

}  // namespace

class agent : public view::session_owner, public std::enable_shared_from_this<agent> {
 public:
  agent(asio::io_context& io, agent_options o)
      : io_(io), opt_(std::move(o)), acceptor_(io), tick_(io), link_timer_(io), ping_(io) {
    lim_.hello_deadline = 5s;
  }

  status start();
  void stop();

  // session_owner: the local applications' sessions (subject 0: this VM).
  asio::io_context& io() override { return io_; }
  const view::server_limits& limits() const override { return lim_; }
  const view::published* values(uint32_t) const override { return &pub_; }
  bool allow_subscribe(uint32_t) override { return subscribes_.take(); }
  void log(severity level, const std::string& id, uint32_t, const std::string& text) override {
    log_.line(level, "agent." + id, "local", text);
  }
  void forget(const view::server_session* s) override {
    asio::post(io_, [self = shared_from_this(), s] {
      std::erase_if(self->apps_, [s](const auto& p) { return p.get() == s; });
    });
  }

 private:
  // Local applications.
  status listen();
  void accept();
  // The host.
  enum class link_state { down, connecting, resyncing, hello, up };
  void connect_host();
  void retry_host(const std::string& why);
  void host_up();
  void host_read();
  void host_send(const view::message& m);
  void host_pump();
  void on_host_frame(view::frame& f);
  void drop_host(const std::string& why);
  void send_resync();
  void ping();
  // Guest probes.
  void start_probes();
  void arm_ring();
  // Every 100 ms.
  void tick();
  void guest_rates(uint64_t now);
  void republish(uint64_t now);

  asio::io_context& io_;
  agent_options opt_;
  view::server_limits lim_;
  view::log_limiter log_{log_sink, "magnet-agent: "};
  asio::basic_socket_acceptor<gproto> acceptor_;
  gid_t group_ = static_cast<gid_t>(-1);
  std::vector<std::shared_ptr<view::server_session>> apps_;
  view::token_bucket subscribes_{20, 20};
  view::published pub_;
  asio::steady_timer tick_, link_timer_, ping_;

  // Host link.
  link_state state_ = link_state::down;
  int transport_ = 0;  // 1 vsock, 2 virtio-serial
  uint64_t gen_ = 0;   // bumped on every (re)connection: stale handlers stop
  std::unique_ptr<gsock> vsock_;
  std::unique_ptr<asio::posix::stream_descriptor> port_;
  view::reader rd_;
  std::deque<std::vector<uint8_t>> out_;
  std::vector<uint8_t> wbuf_;
  bool writing_ = false;
  uint32_t seq_ = 0;
  uint64_t resync_token_ = 0, session_ = 0;
  steady::time_point last_rx_{};
  std::chrono::milliseconds backoff_{100};
  bool said_no_host_ = false;
  uint64_t down_since_ = 0, gaps_ = 0, last_gap_ms_ = 0;
  bool ever_up_ = false;
  std::map<std::pair<uint16_t, uint32_t>, std::pair<view::stat_value, uint64_t>> host_vals_;
  // Clock offset samples (rtt, offset), newest last.
  std::deque<std::pair<uint64_t, int64_t>> clock_;

  // Guest probes.
  std::unique_ptr<capture> cap_;
  std::unique_ptr<ring_consumer> cons_;
  std::unique_ptr<asio::posix::stream_descriptor> ring_fd_;
  std::deque<std::pair<uint64_t, std::array<uint64_t, 4>>> guest_bytes_;  // (t, bytes per probe)
  std::vector<view::stat_value> guest_vals_;
  journey journey_;
};

// ------------------------------------------------------- local applications ---

status agent::listen() {
  if (!opt_.group.empty()) {
    if (const group* g = getgrnam(opt_.group.c_str()))
      group_ = g->gr_gid;
    else
      return error{"--group: no group named '" + opt_.group + "'"};
  }
  const std::string& path = opt_.socket;
  if (auto slash = path.rfind('/'); slash != std::string::npos && slash > 0)
    ::mkdir(path.substr(0, slash).c_str(), 0755);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof sa.sun_path) return error{"socket path too long: " + path};
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  gproto::endpoint ep(&sa, sizeof sa);
  {  // A socket another agent answers on is left alone.
    gsock probe(io_);
    boost::system::error_code ec;
    probe.connect(ep, ec);
    if (!ec) return error{"another magnet-agent serves " + path};
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) return error{path + " exists and is not a socket"};
      ::unlink(path.c_str());
    }
  }
  try {
    acceptor_.open(ep.protocol());
    acceptor_.bind(ep);
    acceptor_.listen(16);
  } catch (const boost::system::system_error& e) {
    return error{"cannot listen on " + path + ": " + e.what()};
  }
  if (group_ != static_cast<gid_t>(-1)) {
    if (::chown(path.c_str(), 0, group_) != 0 || ::chmod(path.c_str(), 0660) != 0)
      return error::from_errno("setting the group of " + path);
  } else if (::chmod(path.c_str(), 0600) != 0) {
    return error::from_errno("chmod " + path);
  }
  accept();
  return {};
}

void agent::accept() {
  acceptor_.async_accept([self = shared_from_this()](boost::system::error_code ec, gsock s) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {
      self->log_.line(severity::warning, "agent.accept_error", "local", ec.message() + "; still accepting");
      auto t = std::make_shared<asio::steady_timer>(self->io_, 100ms);
      t->async_wait([self, t](boost::system::error_code) { self->accept(); });
      return;
    }
    ucred cr{};
    socklen_t len = sizeof cr;
    getsockopt(s.native_handle(), SOL_SOCKET, SO_PEERCRED, &cr, &len);
    const bool ok = cr.uid == 0 || (self->group_ != static_cast<gid_t>(-1) && cr.gid == self->group_);
    view::server_session::params p{0, self->session_, 1, "local", static_cast<uint32_t>(cr.uid), false};
    auto sess = std::make_shared<view::server_session>(self, std::move(s), std::move(p));
    self->apps_.push_back(sess);
    sess->start();
    if (!ok)
      sess->fail(MAGNET_VERR_REFUSED,
                 "uid " + std::to_string(cr.uid) + " is neither root nor in the agent's group");
    else if (self->apps_.size() > 64)
      sess->fail(MAGNET_VERR_REFUSED, "too many local clients");
    self->accept();
  });
}

// --------------------------------------------------------------------- host ---

void agent::connect_host() {
  ++gen_;
  using m = agent_options::host_mode;
  m mode = opt_.host;
  std::string port;
  if (mode == m::automatic) {
    // A guest with a vsock device talks vsock (that is how the host
    // listens for it); without one, the view channel.
    if (local_cid())
      mode = m::vsock;
    else if (!(port = find_port(opt_.channel)).empty())
      mode = m::serial;
    else
      mode = m::none;
  }
  if (mode == m::none) {
    if (!said_no_host_)
      log_warning("magnet-agent: [agent.no_host] no vsock device and no virtio-serial port named " +
                      opt_.channel + ": serving the guest's own data only");
    said_no_host_ = true;
    state_ = link_state::down;
    link_timer_.expires_after(5s);
    link_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->connect_host();
    });
    return;
  }
  state_ = link_state::connecting;
  rd_ = view::reader{};
  out_.clear();
  writing_ = false;
  const uint64_t gen = gen_;
  if (mode == m::vsock) {
    transport_ = 1;
    vsock_ = std::make_unique<gsock>(io_);
    sockaddr_vm sa{};
    sa.svm_family = AF_VSOCK;
    sa.svm_cid = VMADDR_CID_HOST;
    sa.svm_port = opt_.vsock_port;
    // The host accepts only source ports below 1024, which only root can
    // bind (docs/guest.md): its slots are the guest's root's.
    boost::system::error_code oec;
    vsock_->open(gproto(AF_VSOCK, 0), oec);
    if (oec) return retry_host("vsock socket: " + oec.message());
    if (auto bound = bind_reserved_vsock_port(vsock_->native_handle()); !bound)
      log_.line(severity::warning, "agent.unprivileged_port", "host",
                "no vsock source port below 1024 (" + bound.err().message +
                    "; the agent must run as root or with CAP_NET_BIND_SERVICE): connecting "
                    "from a port the kernel picks, which the host refuses unless it runs with "
                    "--vsock-any-port");
    link_timer_.expires_after(2s);
    link_timer_.async_wait([self = shared_from_this(), gen](boost::system::error_code ec) {
      if (!ec && self->gen_ == gen && self->state_ == link_state::connecting)
        self->retry_host("vsock connect timed out");
    });
    vsock_->async_connect(gproto::endpoint(&sa, sizeof sa),
                          [self = shared_from_this(), gen](boost::system::error_code ec) {
                            if (self->gen_ != gen) return;
                            if (ec) return self->retry_host("vsock CID 2 port " +
                                                            std::to_string(self->opt_.vsock_port) +
                                                            ": " + ec.message());
                            self->host_read();
                            self->host_up();
                          });
    return;
  }
  transport_ = 2;
  if (port.empty()) port = find_port(opt_.channel);
  int fd = port.empty() ? -1 : ::open(port.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return retry_host("virtio-serial port " + opt_.channel + ": " +
                      (port.empty() ? std::string("not found") : std::strerror(errno)));
  port_ = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
  // The channel outlives its users: whatever an earlier agent left in it is
  // void until the host answers this token.
  state_ = link_state::resyncing;
  resync_token_ = random64();
  host_read();
  send_resync();
}

void agent::send_resync() {
  if (state_ != link_state::resyncing) return;
  host_send(view::resync{resync_token_, false});
  const uint64_t gen = gen_;
  link_timer_.expires_after(250ms);
  link_timer_.async_wait([self = shared_from_this(), gen](boost::system::error_code ec) {
    if (!ec && self->gen_ == gen) self->send_resync();
  });
}

void agent::host_up() {
  state_ = link_state::hello;
  last_rx_ = steady::now();
  host_send(view::hello{MAGNET_VIEW_VERSION_MIN, MAGNET_VIEW_VERSION, MAGNET_VROLE_AGENT, 0,
                        "magnet-agent " MAGNET_AGENT_VERSION});
}

void agent::retry_host(const std::string& why) {
  ++gen_;
  boost::system::error_code ig;
  if (vsock_) vsock_->close(ig);
  if (port_) port_->close(ig);
  vsock_.reset();
  port_.reset();
  state_ = link_state::down;
  log_.line(severity::info, "agent.host_retry", "host",
            why + "; again in " + std::to_string(backoff_.count()) + " ms");
  link_timer_.expires_after(backoff_);
  backoff_ = std::min(backoff_ * 2, std::chrono::milliseconds(1000));
  link_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec) self->connect_host();
  });
}

void agent::drop_host(const std::string& why) {
  if (state_ == link_state::up) {
    down_since_ = now_ns();
    log_warning("magnet-agent: [agent.host_down] " + why);
    republish(now_ns());
  }
  retry_host(why);
}

void agent::host_read() {
  auto room = rd_.prepare();
  auto h = [self = shared_from_this(), gen = gen_](boost::system::error_code ec, size_t n) {
    if (self->gen_ != gen) return;
    if (ec) return self->drop_host(ec == asio::error::eof ? "the host closed the connection"
                                                          : "read: " + ec.message());
    self->last_rx_ = steady::now();
    self->rd_.commit(n);
    view::frame f;
    error e;
    for (;;) {
      auto st = self->rd_.next(f, e);
      if (st == view::reader::state::more) break;
      if (st == view::reader::state::bad) {
        if (self->transport_ == 2) {  // stale bytes on the channel
          self->rd_.resync();
          continue;
        }
        return self->drop_host("bad frame from the host: " + e.message);
      }
      self->on_host_frame(f);
      if (self->gen_ != gen) return;
    }
    self->host_read();
  };
  if (vsock_)
    vsock_->async_read_some(asio::buffer(room.data(), room.size()), std::move(h));
  else if (port_)
    port_->async_read_some(asio::buffer(room.data(), room.size()), std::move(h));
}

void agent::host_send(const view::message& m) {
  if (out_.size() > 64) return;  // the host does not read: the liveness check will act
  std::vector<uint8_t> b;
  (void)view::encode(b, m, ++seq_, now_ns());
  out_.push_back(std::move(b));
  host_pump();
}

void agent::host_pump() {
  if (writing_ || out_.empty()) return;
  wbuf_ = std::move(out_.front());
  out_.pop_front();
  writing_ = true;
  auto h = [self = shared_from_this(), gen = gen_](boost::system::error_code ec, size_t) {
    if (self->gen_ != gen) return;
    self->writing_ = false;
    if (ec) return self->drop_host("write: " + ec.message());
    self->host_pump();
  };
  if (vsock_)
    asio::async_write(*vsock_, asio::buffer(wbuf_), std::move(h));
  else if (port_)
    asio::async_write(*port_, asio::buffer(wbuf_), std::move(h));
}

void agent::on_host_frame(view::frame& f) {
  if (auto* r = std::get_if<view::resync>(&f.m)) {
    if (state_ == link_state::resyncing && r->reply && r->token == resync_token_) host_up();
    return;
  }
  if (state_ == link_state::resyncing) return;  // stale bytes before our answer
  if (auto* w = std::get_if<view::welcome>(&f.m)) {
    if (state_ != link_state::hello) return;
    const bool other = ever_up_ && w->session_id != session_;
    session_ = w->session_id;
    state_ = link_state::up;
    backoff_ = 100ms;
    said_no_host_ = false;
    view::subscribe s{std::max<uint32_t>(opt_.period_ms, w->min_period_ms), MAGNET_VMODE_PERIODIC,
                      0, {}, {}};
    if (opt_.journey) {
      s.flags = MAGNET_VSUB_EVENTS;
      s.events = {MAGNET_EV_VMNET_QUEUE_TX};
    }
    host_send(s);
    if (down_since_) {
      last_gap_ms_ = (now_ns() - down_since_) / 1'000'000;
      ++gaps_;
      ++pub_.gaps;
      down_since_ = 0;
    }
    host_vals_.clear();
    log_notice(std::string("magnet-agent: [agent.host_up] session ") +
                    (other ? "(a new identity) " : "") + "over " +
                    (transport_ == 1 ? "vsock" : "virtio-serial") +
                    (last_gap_ms_ && gaps_ ? ", after a gap of " + std::to_string(last_gap_ms_) + " ms" : ""));
    ever_up_ = true;
    ping();
    return;
  }
  if (state_ != link_state::up) return;
  if (auto* s = std::get_if<view::stats>(&f.m)) {
    const uint64_t now = now_ns();
    for (const auto& v : s->values) host_vals_[{v.id, v.index}] = {v, now};
    // Values the host no longer sends (an exit reason gone quiet) expire.
    std::erase_if(host_vals_, [&](const auto& kv) { return kv.second.second + 5'000'000'000 < now; });
    republish(now);
  } else if (auto* e = std::get_if<view::events>(&f.m)) {
    if (opt_.journey) {
      // The guest sent each of these packets before the host saw it: its own
      // records are in the ring, maybe not read yet (the ring wakes the agent
      // only past its watermark).  Read them first, or the host's record
      // finds nothing to match and is dropped (a third of the packets
      // matched when it did not).
      if (cons_) (void)cons_->drain();
      journey_.host_records(e->records);
    }
    for (size_t off = 0; off + sizeof(magnet_hdr) <= e->records.size();) {
      const uint8_t* r = e->records.data() + off;
      const auto& h = *reinterpret_cast<const magnet_hdr*>(r);
      off += h.len;
      for (auto& a : apps_) a->add_event(r, h.len);
    }
  } else if (auto* p = std::get_if<view::pong>(&f.m)) {
    const uint64_t now = now_ns();
    if (p->sent_ns <= now) {
      const uint64_t rtt = now - p->sent_ns;
      const int64_t offset = static_cast<int64_t>(p->peer_ns) - static_cast<int64_t>(p->sent_ns + rtt / 2);
      clock_.emplace_back(rtt, offset);
      if (clock_.size() > 10) clock_.pop_front();
      auto best = *std::min_element(clock_.begin(), clock_.end());
      journey_.set_offset(best.second);
    }
  } else if (auto* er = std::get_if<view::errmsg>(&f.m)) {
    log_.line(severity::warning, "agent.host_error", "host",
              "error " + std::to_string(er->code) + ": " + er->text);
  }
}

void agent::ping() {
  if (state_ != link_state::up) return;
  host_send(view::ping{random64(), now_ns()});
  ping_.expires_after(1s);
  ping_.async_wait([self = shared_from_this(), gen = gen_](boost::system::error_code ec) {
    if (!ec && self->gen_ == gen) self->ping();
  });
}

// ------------------------------------------------------------- guest probes ---

void agent::start_probes() {
  // Loading and verifying the probes takes a while on an emulated CPU: in a
  // thread of its own, so the host and local applications are served.
  std::thread([self = shared_from_this()] {
    capture_options co;
    for (uint16_t t : kGuestProbes) co.probes.insert(t);
    co.ring_bytes = 4u << 20;
    auto c = capture::open(co);
    asio::post(self->io_, [self, c = std::make_shared<decltype(c)>(std::move(c))]() mutable {
      if (!*c) {
        log_warning("magnet-agent: [agent.probes] guest probes unavailable: " + (*c).err().message);
        return;
      }
      self->cap_ = std::move(**c);
      std::string attached;
      for (uint16_t t : kGuestProbes) {
        uint32_t mode = MAGNET_MODE_AGGREGATE;
        if (self->opt_.journey && (t == MAGNET_EV_NET_SOCK_SEND || t == MAGNET_EV_NET_DEV_XMIT))
          mode |= MAGNET_MODE_STREAM;
        if (auto s = self->cap_->set_mode(t, mode); !s) {
          log_warning("magnet-agent: [agent.probes] " + event_name(t) + ": " + s.err().message);
          continue;
        }
        attached += (attached.empty() ? "" : ", ") + event_name(t);
      }
      auto k = ring_consumer::create(self->cap_->ringbuf_fd(), *self->cap_,
                                           [w = std::weak_ptr<agent>(self)](std::span<const uint8_t> b) {
                                             if (auto a = w.lock(); a && a->opt_.journey)
                                               a->journey_.guest_records(b);
                                           });
      if (!k) {
        log_warning("magnet-agent: [agent.probes] " + k.err().message);
        return;
      }
      self->cons_ = std::move(*k);
      self->ring_fd_ = std::make_unique<asio::posix::stream_descriptor>(self->io_, ::dup(self->cons_->epoll_fd()));
      self->arm_ring();
      log_notice("magnet-agent: [agent.probes] attached " + attached);
    });
  }).detach();
}

void agent::arm_ring() {
  ring_fd_->async_wait(asio::posix::descriptor_base::wait_read,
                       [self = shared_from_this()](boost::system::error_code ec) {
                         if (ec) return;
                         (void)self->cons_->drain();
                         self->arm_ring();
                       });
}

void agent::guest_rates(uint64_t now) {
  guest_vals_.clear();
  std::array<uint64_t, 4> bytes{};
  if (cap_) {
    for (size_t i = 0; i < 4; ++i) {
      auto a = cap_->aggregate(probe_slot(kGuestProbes[i]), {0});
      bytes[i] = a.count(0) ? a[0].bytes : 0;
    }
    guest_bytes_.emplace_back(now, bytes);
    if (guest_bytes_.size() > 11) guest_bytes_.pop_front();
  }
  const bool have = guest_bytes_.size() > 1;
  const auto& [t0, b0] = guest_bytes_.empty() ? std::pair{now, bytes} : guest_bytes_.front();
  const double secs = static_cast<double>(now - t0) / 1e9;
  static constexpr uint16_t ids[4] = {MAGNET_STAT_GUEST_SOCK_TX_BPS, MAGNET_STAT_GUEST_SOCK_RX_BPS,
                                      MAGNET_STAT_GUEST_DEV_TX_BPS, MAGNET_STAT_GUEST_DEV_RX_BPS};
  for (size_t i = 0; i < 4; ++i)
    guest_vals_.push_back({ids[i], static_cast<uint16_t>(have && secs > 0 ? MAGNET_VSTAT_VALID : 0), 0,
                           static_cast<uint32_t>(secs * 1e6), 0,
                           have && secs > 0 ? static_cast<double>(bytes[i] - b0[i]) * 8 / secs : 0});
  if (opt_.journey) journey_.tick(100'000'000, guest_vals_);
  const bool up = state_ == link_state::up;
  if (!clock_.empty()) {
    auto best = *std::min_element(clock_.begin(), clock_.end());
    guest_vals_.push_back({MAGNET_STAT_CLOCK_OFFSET, static_cast<uint16_t>(up ? MAGNET_VSTAT_VALID : 0), 0, 0, 0,
                           static_cast<double>(best.second) / 1e3});
    guest_vals_.push_back({MAGNET_STAT_CLOCK_ERROR, static_cast<uint16_t>(up ? MAGNET_VSTAT_VALID : 0), 0, 0, 0,
                           static_cast<double>(best.first) / 2e3});
  }
  guest_vals_.push_back({MAGNET_STAT_HOST_LINK, MAGNET_VSTAT_VALID, 0, 0, 0, up ? double(transport_) : 0});
  guest_vals_.push_back({MAGNET_STAT_HOST_GAPS, MAGNET_VSTAT_VALID, 0, 0, 0, static_cast<double>(gaps_)});
  guest_vals_.push_back({MAGNET_STAT_HOST_LAST_GAP, static_cast<uint16_t>(gaps_ ? MAGNET_VSTAT_VALID : 0), 0, 0, 0,
                         static_cast<double>(last_gap_ms_)});
}

// The view applications get: the host's values (invalid while there is no
// host; each with the age it had plus the time since it arrived) and the
// guest's own.
void agent::republish(uint64_t now) {
  pub_.stats.clear();
  const bool up = state_ == link_state::up;
  for (const auto& [k, v] : host_vals_) {
    view::stat_value x = v.first;
    x.age_us = static_cast<uint32_t>(std::min<uint64_t>(x.age_us + (now - v.second) / 1000, UINT32_MAX));
    if (!up) x.flags &= ~MAGNET_VSTAT_VALID;
    pub_.stats.push_back(x);
  }
  pub_.stats.insert(pub_.stats.end(), guest_vals_.begin(), guest_vals_.end());
  pub_.at_ns = now;
  auto all = apps_;
  for (auto& a : all) a->publish();
}

void agent::tick() {
  tick_.expires_after(100ms);
  tick_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec) return;
    const uint64_t now = now_ns();
    if (self->cons_) (void)self->cons_->drain();
    self->guest_rates(now);
    self->republish(now);
    auto t = steady::now();
    auto all = self->apps_;
    for (auto& a : all) a->check(t);
    if (self->state_ == link_state::up && t - self->last_rx_ > 3s)
      self->drop_host("no frame from the host for 3 s");
    else if (self->state_ == link_state::hello && t - self->last_rx_ > 3s)
      self->drop_host("no welcome from the host within 3 s");
    self->tick();
  });
}

status agent::start() {
  if (auto s = listen(); !s) return s;
  down_since_ = 0;
  connect_host();
  if (opt_.probes) start_probes();
  tick();
  log_notice("magnet-agent: [agent.started] socket " + opt_.socket);
  return {};
}

void agent::stop() {
  ++gen_;
  boost::system::error_code ig;
  acceptor_.close(ig);
  tick_.cancel();
  link_timer_.cancel();
  ping_.cancel();
  if (vsock_) vsock_->close(ig);
  if (port_) port_->close(ig);
  auto all = apps_;
  for (auto& a : all) a->close("the agent stops", false);
  ::unlink(opt_.socket.c_str());
}

int run_agent(const agent_options& o) {
  asio::io_context io;
  auto a = std::make_shared<agent>(io, o);
  if (auto s = a->start(); !s) {
    log_error("magnet-agent: " + s.err().message);
    return 1;
  }
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](boost::system::error_code ec, int) {
    if (!ec) io.stop();
  });
  asio::steady_timer limit(io);
  if (o.duration_ns) {
    limit.expires_after(std::chrono::nanoseconds(o.duration_ns));
    limit.async_wait([&](boost::system::error_code ec) {
      if (!ec) io.stop();
    });
  }
  io.run();
  a->stop();
  io.restart();
  io.poll();
  log_notice("magnet-agent: [agent.stopped]");
  return 0;
}

}  // namespace magnet::guest
