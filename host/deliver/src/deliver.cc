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

void log_sink(int level, const std::string& line) { log_line(level, line); }

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
  std::unique_ptr<asio::basic_socket_acceptor<gproto>> acceptor;
  asio::steady_timer housekeeping;
  std::map<uint32_t, vm_entry> vms;
  std::vector<std::shared_ptr<session>> sessions;
  view::log_limiter log_{log_sink, "magnet-host: "};
  bool stopped = false;

  impl(asio::io_context& i, deliver_options o) : io_(i), opt(std::move(o)), housekeeping(i) {
    lim.hello_deadline = opt.hello_deadline;
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
    log_.line(1, "deliver.rate", who(vm),
              "more than " + std::to_string(opt.max_subscribes_per_s) + " subscriptions per second");
    return false;
  }
  void log(int level, const std::string& id, uint32_t vm, const std::string& text) override {
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
  std::shared_ptr<session> add(gsock s, transport kind, uint32_t vm, uint32_t cid, uint64_t sid) {
    // Every peer of the hub is a guest (adopt()'s test sockets stand in
    // for one).
    view::server_session::params p{vm, sid, static_cast<int>(kind),
                                   std::string(transport_name(kind)), cid,
                                   kind == transport::serial, true};
    auto sess = std::make_shared<session>(shared_from_this(), std::move(s), std::move(p));
    sessions.push_back(sess);
    sess->start();
    return sess;
  }
  void accept();
  void on_accept(gsock s, const gproto::endpoint& peer);
  void connect_channel(uint32_t vm);
  void tick();
  unsigned count(uint32_t vm, transport t) const;
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

unsigned delivery_hub::impl::count(uint32_t vm, transport t) const {
  unsigned n = 0;
  for (const auto& s : sessions)
    n += !s->closed() && s->subject() == vm && s->kind() == static_cast<int>(t);
  return n;
}

void delivery_hub::impl::accept() {
  auto peer = std::make_shared<gproto::endpoint>();
  acceptor->async_accept(*peer, [self = shared_from_this(), peer](boost::system::error_code ec,
                                                                   gsock s) {
    if (self->stopped) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // Keep accepting; wait a little when the process is out of fds.
      self->log_.line(1, "deliver.accept_error", "vsock", ec.message());
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
  const uint32_t cid = reinterpret_cast<const sockaddr_vm*>(peer.data())->svm_cid;
  const std::string c = "cid " + std::to_string(cid);
  auto refuse = [&](const std::string& subject, const std::string& why) {
    log_.line(1, "deliver.refused", subject, "vsock connection from " + c + " refused: " + why);
    std::vector<uint8_t> b;
    (void)view::encode(b, view::errmsg{MAGNET_VERR_REFUSED, why}, 1, now_ns());
    // Best effort and non-blocking: the refusal must not wait on the peer.
    s.non_blocking(true, ec);
    s.send(asio::buffer(b), 0, ec);
    s.close(ec);
  };
  // 0 hypervisor, 1 local loopback, 2 this host: never a guest.
  if (cid <= VMADDR_CID_HOST || cid == VMADDR_CID_ANY)
    return refuse(c, "CID " + std::to_string(cid) + " is not a guest's");
  const vm_entry* match = nullptr;
  int n = 0;
  for (const auto& [id, e] : vms)
    if (e.id.cid == cid) match = &e, ++n;
  if (n != 1) return refuse(c, n ? "CID claimed by several domains" : "no running domain has this CID");
  // The registry may lag behind a VM that just stopped: its QEMU must live.
  if (match->id.qemu_pid <= 0 || (::kill(match->id.qemu_pid, 0) != 0 && errno == ESRCH))
    return refuse(who(match->id.vm_id), "its QEMU process is gone");
  if (count(match->id.vm_id, transport::vsock) >= opt.max_conns_per_vm)
    return refuse(who(match->id.vm_id),
                  "more than " + std::to_string(opt.max_conns_per_vm) + " connections");
  log_.line(2, "deliver.accepted", who(match->id.vm_id), "vsock connection from " + c);
  add(std::move(s), transport::vsock, match->id.vm_id, cid, match->id.session_id);
}

void delivery_hub::impl::connect_channel(uint32_t vm) {
  auto& e = vms[vm];
  if (e.channel || e.connecting || e.id.channel.empty() || stopped) return;
  if (clock_type::now() < e.retry_at) return;
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (e.id.channel.size() >= sizeof sa.sun_path) {
    log_.line(1, "deliver.channel", who(vm), "channel path too long: " + e.id.channel);
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
                          self->log_.line(2, "deliver.channel", self->who(vm),
                                         "cannot connect to " + e.id.channel + ": " + ec.message());
                          return;
                        }
                        // The kernel says who listens there: it must be the VM's QEMU.
                        ucred cr{};
                        socklen_t len = sizeof cr;
                        if (getsockopt(sock->native_handle(), SOL_SOCKET, SO_PEERCRED, &cr, &len) ||
                            cr.pid != e.id.qemu_pid) {
                          self->log_.line(1, "deliver.refused", self->who(vm),
                                         "view channel " + e.id.channel + " is served by pid " +
                                             std::to_string(cr.pid) + ", not the VM's QEMU (pid " +
                                             std::to_string(e.id.qemu_pid) + ")");
                          boost::system::error_code ig;
                          sock->close(ig);
                          e.retry_at = clock_type::now() + std::chrono::seconds(5);
                          return;
                        }
                        self->log_.line(2, "deliver.channel", self->who(vm),
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
  using vm = deliver_options::vsock_mode;
  if (p_->opt.vsock == vm::off) return {};
  if (p_->opt.vsock == vm::automatic && ::access("/dev/vhost-vsock", F_OK) != 0) {
    log_line(2, "magnet-host: [deliver.vsock_off] no /dev/vhost-vsock: this host runs no vsock "
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
    log_line(1, "magnet-host: [deliver.vsock_off] " + why);
    return {};
  }
  log_line(2, "magnet-host: [deliver.listen] vsock port " + std::to_string(p_->opt.vsock_port));
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

std::vector<view::session_info> delivery_hub::sessions() const {
  std::vector<view::session_info> v;
  for (const auto& s : p_->sessions)
    if (!s->closed()) v.push_back(s->info());
  return v;
}

}  // namespace magnet::host
