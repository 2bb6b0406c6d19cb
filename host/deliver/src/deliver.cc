#include "magnet/deliver/deliver.h"

#include <linux/vm_sockets.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>
#include <set>

#include <boost/asio/thread_pool.hpp>

#include "magnet/log.h"
#include "magnet/event.h"
#include "magnet/record.h"

namespace magnet::host {

namespace asio = boost::asio;
using gproto = asio::generic::stream_protocol;
using gsock = gproto::socket;
using clock_type = std::chrono::steady_clock;

std::string_view transport_name(transport t) {
  switch (t) {
    case transport::vsock: return "vsock";
    case transport::serial: return "virtio-serial";
    case transport::test: return "test";
  }
  return "?";
}

namespace {

uint64_t now_ns() { return view::monotonic_now_ns(); }

// CID checks waiting for the registry at once, all VMs together: each VM's
// are bounded by its accept rate already; this bounds them all when the
// registry is slow to answer.
constexpr unsigned kMaxChecks = 16;

void log_sink(severity level, const std::string& line) { log_line(level, line); }

}  // namespace

using session = view::server_session;

struct vm_entry {
  vm_ident id;
  view::published pub;
  view::token_bucket subscribes;
  // The view channel: a connection is up or being made, else a retry is due.
  std::shared_ptr<session> channel;
  bool connecting = false;
  clock_type::time_point retry_at{};
};

struct delivery_hub::impl : view::session_owner, std::enable_shared_from_this<impl> {
  asio::io_context& io_;
  deliver_options opt;
  view::server_limits lim;
  vsock_admission adm;
  // Where cid_owner runs (it may block on libvirt); results come back to
  // the io thread.
  std::unique_ptr<asio::thread_pool> checker;
  unsigned checking = 0;
  std::unique_ptr<asio::basic_socket_acceptor<gproto>> acceptor;
  asio::steady_timer housekeeping;
  std::map<uint32_t, vm_entry> vms;
  std::vector<std::shared_ptr<session>> sessions;
  view::log_limiter log_{log_sink, "magnet-host: "};
  bool stopped = false;

  impl(asio::io_context& i, deliver_options o)
      : io_(i),
        opt(std::move(o)),
        adm({opt.vsock_any_port, opt.vsock_accepts_per_s, opt.vsock_accept_burst, opt.max_conns_per_vm}),
        housekeeping(i) {
    lim.hello_deadline = opt.hello_deadline;
    lim.subscribe_deadline = opt.subscribe_deadline;
    lim.serial = opt.serial_flood;
    lim.frame_deadline = opt.frame_deadline;
    lim.write_deadline = opt.write_deadline;
    lim.max_msgs_per_s = opt.max_msgs_per_s;
    lim.max_event_bytes = opt.max_event_bytes;
    lim.max_events_per_s = opt.max_events_per_s;
  }

  // session_owner
  asio::io_context& io() override { return io_; }
  const view::server_limits& limits() const override { return lim; }
  const view::published* values(uint32_t vm) const override {
    auto it = vms.find(vm);
    return it != vms.end() ? &it->second.pub : nullptr;
  }
  bool allow_subscribe(uint32_t vm) override {
    auto it = vms.find(vm);
    if (it == vms.end() || it->second.subscribes.take()) return it != vms.end();
    log_.line(severity::warning, "deliver.rate", who(vm),
              "more than " + std::to_string(opt.max_subscribes_per_s) + " subscriptions per second");
    return false;
  }
  void log(severity level, const std::string& id, uint32_t vm, const std::string& text) override {
    log_.line(level, "deliver." + id, who(vm), text);
  }
  void forget(const session* s) override;
  const std::set<uint32_t>* vcpu_tids(uint32_t vm) const override {
    auto it = vms.find(vm);
    return it != vms.end() ? &it->second.id.vcpu_tids : nullptr;
  }

  std::string who(uint32_t vm) const {
    auto it = vms.find(vm);
    return it != vms.end() ? "vm " + it->second.id.name + " (id " + std::to_string(vm) + ")"
                           : "vm id " + std::to_string(vm);
  }
  std::shared_ptr<session> add(gsock s, transport kind, uint32_t vm, uint32_t cid, uint64_t sid,
                               uint32_t port = 0) {
    // Every peer of the hub is a guest (adopt()'s test sockets stand in
    // for one).
    view::server_session::params p{vm, sid, static_cast<int>(kind),
                                   std::string(transport_name(kind)), cid,
                                   kind == transport::serial, true, port};
    auto sess = std::make_shared<session>(shared_from_this(), std::move(s), std::move(p));
    sessions.push_back(sess);
    sess->start();
    return sess;
  }
  void accept();
  void on_accept(gsock s, const gproto::endpoint& peer);
  void admit(gsock s, vsock_peer p);
  void check_cid(gsock s, vsock_peer p, uint32_t vm, uint64_t sid);
  void settle(gsock s, vsock_peer p, uint32_t vm, uint64_t sid, const result<uint32_t>& owner);
  void refuse(gsock& s, vsock_peer p, const verdict& v);
  void connect_channel(uint32_t vm);
  void tick();
};

// --------------------------------------------------------------------- hub ---

void delivery_hub::impl::forget(const session* s) {
  // Deferred: the caller may be iterating.
  asio::post(io_, [self = shared_from_this(), s] {
    std::erase_if(self->sessions, [s](const auto& p) { return p.get() == s; });
    for (auto& [id, e] : self->vms)
      if (e.channel.get() == s) {
        e.channel.reset();
        e.retry_at = clock_type::now() + std::chrono::seconds(1);
      }
  });
}

void delivery_hub::impl::accept() {
  auto peer = std::make_shared<gproto::endpoint>();
  acceptor->async_accept(*peer, [self = shared_from_this(), peer](boost::system::error_code ec,
                                                                   gsock s) {
    if (self->stopped) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // Keep accepting; wait a little when the process is out of fds.
      self->log_.line(severity::warning, "deliver.accept_error", "vsock", ec.message());
      auto t = std::make_shared<asio::steady_timer>(self->io_, std::chrono::milliseconds(100));
      t->async_wait([self, t](boost::system::error_code) {
        if (!self->stopped) self->accept();
      });
      return;
    }
    self->on_accept(std::move(s), *peer);
    self->accept();
  });
}

void delivery_hub::impl::on_accept(gsock s, const gproto::endpoint& peer) {
  boost::system::error_code ec;
  if (peer.size() < sizeof(sockaddr_vm) ||
      reinterpret_cast<const sockaddr*>(peer.data())->sa_family != AF_VSOCK) {
    s.close(ec);
    return;
  }
  const auto* sa = reinterpret_cast<const sockaddr_vm*>(peer.data());
  admit(std::move(s), {sa->svm_cid, sa->svm_port});
}

// A refused connection costs the accept and one non-blocking write.
void delivery_hub::impl::refuse(gsock& s, vsock_peer p, const verdict& v) {
  adm.count(v.vm, v.why);
  const std::string from = "cid " + std::to_string(p.cid);
  log_.line(severity::warning, "deliver.refused." + std::string(refusal_name(v.why)), v.vm ? who(v.vm) : from,
            "vsock connection from " + from + " refused: " + v.text + " (source port " +
                std::to_string(p.port) + ")");
  std::vector<uint8_t> b;
  (void)view::encode(b, view::errmsg{v.why == refusal::rate ? uint16_t{MAGNET_VERR_RATE}
                                                            : uint16_t{MAGNET_VERR_REFUSED},
                                     v.text},
                     1, now_ns());
  boost::system::error_code ec;
  s.non_blocking(true, ec);
  s.send(asio::buffer(b), 0, ec);
  s.close(ec);
}

void delivery_hub::impl::admit(gsock s, vsock_peer p) {
  std::vector<known_vm> known;
  for (const auto& [id, e] : vms) known.push_back({id, e.id.cid});
  auto v = adm.screen(p, known, clock_type::now());
  if (!v.admitted()) return refuse(s, p, v);
  const uint64_t sid = vms.at(v.vm).id.session_id;
  if (!opt.cid_owner) return settle(std::move(s), p, v.vm, sid, result<uint32_t>(v.vm));
  if (!checker || checking >= kMaxChecks)
    return refuse(s, p, {refusal::busy, v.vm, "the host is busy checking other connections' CIDs"});
  check_cid(std::move(s), p, v.vm, sid);
}

// Asks the registry off the io thread; the answer is settled on it.
void delivery_hub::impl::check_cid(gsock s, vsock_peer p, uint32_t vm, uint64_t sid) {
  ++checking;
  auto sock = std::make_shared<gsock>(std::move(s));
  std::weak_ptr<impl> w = shared_from_this();
  asio::post(*checker, [w, io = &io_, ask = opt.cid_owner, sock, p, vm, sid]() mutable {
    result<uint32_t> owner = error{"no answer"};
    try {
      owner = ask(p.cid);
    } catch (const std::exception& e) {
      owner = error{std::string("the check failed: ") + e.what()};
    }
    // The socket goes back with the answer: it is closed on the io thread.
    asio::post(*io, [w, sock = std::move(sock), p, vm, sid, owner = std::move(owner)]() mutable {
      auto self = w.lock();
      if (!self) return;
      --self->checking;
      if (self->stopped) return;
      self->settle(std::move(*sock), p, vm, sid, owner);
    });
  });
}

void delivery_hub::impl::settle(gsock s, vsock_peer p, uint32_t vm, uint64_t sid,
                                const result<uint32_t>& owner) {
  // The hub's own list may have changed while the registry was asked.
  auto it = vms.find(vm);
  if (it == vms.end() || it->second.id.session_id != sid)
    return refuse(s, p, {refusal::changed, vm, "its VM stopped or restarted meanwhile"});
  if (it->second.id.cid != p.cid)
    return refuse(s, p, {refusal::moved, vm, "CID " + std::to_string(p.cid) + " is not this VM's any more"});
  if (auto c = vsock_admission::confirm(p, vm, owner); !c.admitted()) return refuse(s, p, c);
  // The registry may lag behind a VM that just stopped: its QEMU must live.
  const auto& id = it->second.id;
  if (id.qemu_pid <= 0 || (::kill(id.qemu_pid, 0) != 0 && errno == ESRCH))
    return refuse(s, p, {refusal::qemu_gone, vm, "its QEMU process is gone"});
  std::vector<std::shared_ptr<session>> mine;
  std::vector<open_conn> open;
  for (const auto& x : sessions)
    if (!x->ending() && x->subject() == vm && x->kind() == static_cast<int>(transport::vsock)) {
      mine.push_back(x);
      open.push_back({x->has_subscribed(), x->opened()});
    }
  auto pl = adm.place(open);
  if (pl.why != refusal::none) return refuse(s, p, {pl.why, vm, pl.text});
  if (pl.evict) {
    log_.line(severity::notice, "deliver.replaced", who(vm),
              "vsock connection from port " + std::to_string(mine[*pl.evict]->info().peer_port) +
                  " closed for a new one from port " + std::to_string(p.port) + ": " + pl.text);
    mine[*pl.evict]->fail(MAGNET_VERR_REFUSED, pl.text);
  }
  adm.count_accepted(vm, pl.evict.has_value());
  log_.line(severity::info, "deliver.accepted", who(vm),
            "vsock connection from cid " + std::to_string(p.cid) + " port " + std::to_string(p.port));
  add(std::move(s), transport::vsock, vm, p.cid, sid, p.port);
}

void delivery_hub::impl::connect_channel(uint32_t vm) {
  auto& e = vms[vm];
  if (e.channel || e.connecting || e.id.channel.empty() || stopped) return;
  if (clock_type::now() < e.retry_at) return;
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (e.id.channel.size() >= sizeof sa.sun_path) {
    log_.line(severity::warning, "deliver.channel", who(vm), "channel path too long: " + e.id.channel);
    e.retry_at = clock_type::now() + std::chrono::hours(1);
    return;
  }
  std::memcpy(sa.sun_path, e.id.channel.c_str(), e.id.channel.size() + 1);
  auto sock = std::make_shared<gsock>(io_);
  e.connecting = true;
  const uint64_t sid = e.id.session_id;
  sock->async_connect(gproto::endpoint(&sa, sizeof sa),
                      [self = shared_from_this(), sock, vm, sid](boost::system::error_code ec) {
                        auto it = self->vms.find(vm);
                        if (it == self->vms.end() || it->second.id.session_id != sid) return;
                        auto& e = it->second;
                        e.connecting = false;
                        if (self->stopped) return;
                        if (ec) {
                          e.retry_at = clock_type::now() + std::chrono::seconds(1);
                          self->log_.line(severity::info, "deliver.channel", self->who(vm),
                                         "cannot connect to " + e.id.channel + ": " + ec.message());
                          return;
                        }
                        // The kernel says who listens there: it must be the VM's QEMU.
                        ucred cr{};
                        socklen_t len = sizeof cr;
                        if (getsockopt(sock->native_handle(), SOL_SOCKET, SO_PEERCRED, &cr, &len) ||
                            cr.pid != e.id.qemu_pid) {
                          self->log_.line(severity::warning, "deliver.refused", self->who(vm),
                                         "view channel " + e.id.channel + " is served by pid " +
                                             std::to_string(cr.pid) + ", not the VM's QEMU (pid " +
                                             std::to_string(e.id.qemu_pid) + ")");
                          boost::system::error_code ig;
                          sock->close(ig);
                          e.retry_at = clock_type::now() + std::chrono::seconds(5);
                          return;
                        }
                        self->log_.line(severity::info, "deliver.channel", self->who(vm),
                                        "connected to view channel " + e.id.channel);
                        e.channel = self->add(std::move(*sock), transport::serial, vm, 0, sid);
                      });
}

void delivery_hub::impl::tick() {
  housekeeping.expires_after(std::chrono::milliseconds(100));
  housekeeping.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->stopped) return;
    auto now = clock_type::now();
    auto all = self->sessions;  // check() may close (and forget) sessions
    for (auto& s : all) s->check(now);
    if (self->opt.serial)
      for (auto& [id, e] : self->vms) self->connect_channel(id);
    self->tick();
  });
}

delivery_hub::delivery_hub(asio::io_context& io, deliver_options o)
    : p_(std::make_shared<impl>(io, std::move(o))) {}

delivery_hub::~delivery_hub() { stop(); }

status delivery_hub::start() {
  p_->tick();
  if (p_->opt.cid_owner && !p_->checker) p_->checker = std::make_unique<asio::thread_pool>(1);
  using vm = deliver_options::vsock_mode;
  if (p_->opt.vsock == vm::off) return {};
  if (p_->opt.vsock == vm::automatic && ::access("/dev/vhost-vsock", F_OK) != 0) {
    log_info("magnet-host: [deliver.vsock_off] no /dev/vhost-vsock: this host runs no vsock "
                "guests, so no vsock listener (--vsock on forces one)");
    return {};
  }
  sockaddr_vm sa{};
  sa.svm_family = AF_VSOCK;
  sa.svm_cid = VMADDR_CID_ANY;
  sa.svm_port = p_->opt.vsock_port;
  try {
    auto a = std::make_unique<asio::basic_socket_acceptor<gproto>>(p_->io_);
    gproto::endpoint ep(&sa, sizeof sa);
    a->open(ep.protocol());
    a->bind(ep);
    a->listen(64);
    p_->acceptor = std::move(a);
  } catch (const boost::system::system_error& e) {
    std::string why = "cannot listen on vsock port " + std::to_string(p_->opt.vsock_port) + ": " +
                      e.what();
    if (p_->opt.vsock == vm::on) return error{why};
    log_warning("magnet-host: [deliver.vsock_off] " + why);
    return {};
  }
  log_info("magnet-host: [deliver.listen] vsock port " + std::to_string(p_->opt.vsock_port));
  p_->accept();
  return {};
}

void delivery_hub::stop() {
  if (!p_ || p_->stopped) return;
  auto all = p_->sessions;
  for (auto& s : all) s->close("the daemon stops", false);
  p_->stopped = true;
  // Each session owns the hub (its owner) and the hub its sessions: the
  // forget() that closing posts breaks that cycle only if the loop runs
  // again, which nothing promises after stop (LeakSanitizer found the
  // sessions of every DeliverTest left so).  A stopped hub serves no one.
  p_->sessions.clear();
  for (auto& [id, e] : p_->vms) e.channel.reset();
  boost::system::error_code ec;
  if (p_->acceptor) p_->acceptor->close(ec);
  p_->housekeeping.cancel();
  // A check in flight ends with its registry call (answers after this are
  // dropped: the hub is stopped).
  if (p_->checker) {
    p_->checker->stop();
    p_->checker->join();
  }
}

bool delivery_hub::listening_vsock() const { return p_->acceptor && p_->acceptor->is_open(); }

void delivery_hub::set_vms(const std::vector<vm_ident>& list) {
  std::map<uint32_t, vm_ident> now;
  for (const auto& v : list) now[v.vm_id] = v;
  // Every connection is checked against the new state: its VM still runs
  // as the same process, and (vsock) still owns the CID it came from.
  auto all = p_->sessions;
  for (auto& s : all) {
    auto it = now.find(s->subject());
    if (it == now.end())
      s->close("its VM stopped", false);
    else if (it->second.session_id != s->session_id())
      s->close("its VM was restarted (new identity)", false);
    else if (s->kind() == static_cast<int>(transport::vsock) && s->peer() &&
             it->second.cid != s->peer())
      s->close("its VM no longer has CID " + std::to_string(s->peer()), true);
  }
  for (auto it = p_->vms.begin(); it != p_->vms.end();) {
    auto n = now.find(it->first);
    if (n == now.end()) {
      it = p_->vms.erase(it);
      continue;
    }
    if (n->second.session_id != it->second.id.session_id ||
        n->second.channel != it->second.id.channel) {
      if (it->second.channel) it->second.channel->close("its view channel changed", false);
      it->second = vm_entry{};
    }
    it->second.id = n->second;
    ++it;
  }
  for (const auto& [id, v] : now)
    if (!p_->vms.count(id)) p_->vms[id].id = v;
  std::set<uint32_t> running;
  for (const auto& [id, v] : now) running.insert(id);
  p_->adm.keep_only(running);
  for (auto& [id, e] : p_->vms)
    if (e.subscribes.rate != p_->opt.max_subscribes_per_s)
      e.subscribes = view::token_bucket(p_->opt.max_subscribes_per_s, p_->opt.max_subscribes_per_s);
  if (p_->opt.serial)
    for (auto& [id, e] : p_->vms) p_->connect_channel(id);
}

void delivery_hub::publish(uint32_t vm, uint64_t at_ns, const std::vector<view::stat_value>& stats) {
  auto it = p_->vms.find(vm);
  if (it == p_->vms.end()) return;
  it->second.pub.stats = stats;
  it->second.pub.at_ns = at_ns;
  // Only this VM's sessions (a copy: publishing may close one).
  std::vector<std::shared_ptr<session>> mine;
  for (auto& s : p_->sessions)
    if (s->subject() == vm) mine.push_back(s);
  for (auto& s : mine) s->publish();
}

void delivery_hub::set_marker(uint32_t vm, double value, uint64_t at_ns) {
  auto it = p_->vms.find(vm);
  if (it == p_->vms.end()) return;
  it->second.pub.marker = value;
  it->second.pub.marker_at = at_ns;
  auto all = p_->sessions;
  for (auto& s : all)
    if (s->subject() == vm) s->publish();
}

void delivery_hub::publish_events(std::span<const uint8_t> recs) {
  if (p_->sessions.empty()) return;
  for_each_vm_record(recs, [&](const magnet_hdr& h, const uint8_t* r) {
    for (auto& s : p_->sessions)
      if (s->subject() == h.vm_id) s->add_event(r, h.len);
  });
}

void delivery_hub::adopt(uint32_t vm, int fd, transport kind) {
  gsock s(p_->io_);
  s.assign(gproto(AF_UNIX, 0), fd);
  auto it = p_->vms.find(vm);
  uint64_t sid = it != p_->vms.end() ? it->second.id.session_id : 0;
  p_->add(std::move(s), kind, vm, 0, sid);
}

void delivery_hub::accept_vsock(int fd, vsock_peer peer) {
  gsock s(p_->io_);
  s.assign(gproto(AF_UNIX, 0), fd);
  p_->admit(std::move(s), peer);
}

std::map<uint32_t, accept_counts> delivery_hub::vsock_counts() const { return p_->adm.counts(); }

std::vector<view::session_info> delivery_hub::sessions() const {
  std::vector<view::session_info> v;
  for (const auto& s : p_->sessions)
    if (!s->closed()) v.push_back(s->info());
  return v;
}

}  // namespace magnet::host
