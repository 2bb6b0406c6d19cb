#include "magnet/view_server.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "magnet/event.h"
#include "magnet/record.h"

namespace magnet::view {

namespace asio = boost::asio;
using namespace std::chrono_literals;

uint64_t monotonic_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

// Printable, bounded text from a peer (labels) for logs.
std::string sanitize(std::string_view s) {
  std::string o;
  for (char c : s.substr(0, MAGNET_VIEW_MAX_LABEL)) o += (c >= 0x20 && c < 0x7f && c != '"') ? c : '?';
  return o;
}

std::string ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

}  // namespace

bool token_bucket::take_at(steady::time_point now, double n) {
  if (now < last) now = last;  // a caller's clock reading older than the last one
  tokens = std::min(burst, tokens + std::chrono::duration<double>(now - last).count() * rate);
  last = now;
  if (tokens < n) return false;
  tokens -= n;
  return true;
}

void log_limiter::line(severity level, const std::string& id, const std::string& subject,
                       const std::string& text) {
  constexpr int kLines = 5;
  constexpr auto kWindow = 10s;
  auto& e = seen_[{id, subject}];
  auto now = steady::now();
  if (now - e.start > kWindow) {
    if (e.suppressed)
      sink_(level, prefix_ + "[" + id + "] " + subject + ": " + std::to_string(e.suppressed) +
                       " more like this suppressed");
    e = {now, 0, 0};
  }
  if (e.lines++ < kLines)
    sink_(level, prefix_ + "[" + id + "] " + subject + ": " + text);
  else
    e.suppressed++;
  if (seen_.size() > 4096) seen_.clear();
}

server_session::server_session(std::shared_ptr<session_owner> owner, socket s, params p)
    : owner_(std::move(owner)),
      sock_(std::move(s)),
      p_(std::move(p)),
      push_(owner_->io()),
      msgs_(owner_->limits().max_msgs_per_s, 2.0 * owner_->limits().max_msgs_per_s),
      event_budget_(owner_->limits().max_events_per_s, owner_->limits().max_events_per_s),
      opened_(steady::now()),
      resume_(owner_->io()) {}

void server_session::start() {
  if (p_.guest_peer) {
    // Per session: ids a guest saw in one session tell nothing of another's.
    auto k = random_siphash_key();
    if (!k) return fail(MAGNET_VERR_REFUSED, "no key for this session: " + k.err().message);
    guest_.key = *k;
  }
  read();
}

void server_session::close(const std::string& why, bool warn) {
  if (closed_) return;
  closed_ = true;
  owner_->log(warn ? severity::warning : severity::info, warn ? "closed" : "ended", p_.subject,
              where() + " connection closed: " + why);
  boost::system::error_code ec;
  push_.cancel();
  resume_.cancel();
  sock_.shutdown(socket::shutdown_both, ec);
  sock_.close(ec);
  owner_->forget(this);
}

void server_session::fail(uint16_t code, const std::string& why) {
  if (closed_ || closing_) return;
  closing_ = true;
  close_why_ = why;
  owner_->log(severity::warning, "refused", p_.subject, where() + ": " + why);
  // Nothing else is sent: the error, then the end.
  control_.clear();
  stats_.clear();
  events_.clear();
  events_bytes_ = 0;
  std::vector<uint8_t> b;
  (void)encode(b, errmsg{code, why}, ++seq_, monotonic_now_ns(),
               hello_ ? version_ : MAGNET_VIEW_VERSION);
  control_.push_back(std::move(b));
  pump();
}

void server_session::check(steady::time_point now) {
  if (closed_) return;
  const auto& lim = owner_->limits();
  if (!p_.resyncable && !hello_ && now - opened_ > lim.hello_deadline)
    return fail(MAGNET_VERR_TIMEOUT, "no hello within " + ms(lim.hello_deadline));
  if (!p_.resyncable && lim.subscribe_deadline.count() > 0 && !ever_subscribed_ &&
      now - opened_ > lim.subscribe_deadline)
    return fail(MAGNET_VERR_TIMEOUT, "no subscribe within " + ms(lim.subscribe_deadline) +
                                         " of connecting");
  // A paused channel's partial frame is dropped when it resumes.
  if (!paused_ && rd_.partial() && now - frame_start_ > lim.frame_deadline) {
    if (!p_.resyncable)
      return fail(MAGNET_VERR_TIMEOUT, "a frame did not complete within " + ms(lim.frame_deadline));
    owner_->log(severity::warning, "bad_frame", p_.subject,
                where() + ": a frame did not complete in time; resynchronising");
    rd_ = reader{};
    rd_.resync();
  }
  if (writing_ && now - write_start_ > lim.write_deadline)
    return close("the peer read nothing for " + ms(lim.write_deadline) + " (slow reader)", true);
  if (closing_ && now - write_start_ > 1s) return close(close_why_, true);
  flush_events();
}

void server_session::publish() {
  if (!subscribed_ || closed_ || closing_) return;
  // host.marker is an operator's probe of the delivery path (magnet mark,
  // root only): a new value goes out at once, whatever the period (a
  // pulling client still gets only what it asks for).
  if (sub_.mode != MAGNET_VMODE_PULL && marker_changed()) return push_now();
  if (sub_.mode == MAGNET_VMODE_ON_CHANGE && changed()) push_due();
  // Periodic frames ride on the publisher's own wakeups when one is due
  // (within a quarter of the period, at most 20 ms): a hundred sessions
  // then cost one wakeup per tick, not one each.  Their timer stays as the
  // fallback for a publisher that goes quiet or a period shorter than its
  // ticks.
  if (sub_.mode == MAGNET_VMODE_PERIODIC && steady::now() - last_push_ >= sub_.period_ms * 1ms - slack())
    push_now();
}

std::chrono::milliseconds server_session::slack() const {
  return std::min<std::chrono::milliseconds>(std::chrono::milliseconds(sub_.period_ms / 4), 20ms);
}

bool server_session::marker_changed() const {
  if (!wanted(MAGNET_STAT_HOST_MARKER)) return false;
  const published* e = owner_->values(p_.subject);
  if (!e) return false;
  std::optional<double> now = e->marker;
  for (const auto& v : e->stats)  // a relay (the guest agent) has it as a stat
    if (v.id == MAGNET_STAT_HOST_MARKER && v.valid()) now = v.value;
  return now && marker_sent_ != now;
}

void server_session::add_event(const uint8_t* rec, size_t len) {
  if (!subscribed_ || !(sub_.flags & MAGNET_VSUB_EVENTS) || closing_ || closed_) return;
  const auto& h = hdr_of(rec);
  if (!ev_types_.empty() && !ev_types_.count(h.type)) return;
  // A guest's copy is never longer than the record: room for @len is room.
  if (batch_.size() + len > MAGNET_VIEW_MAX_BODY - sizeof(magnet_view_events)) flush_events();
  const size_t at = batch_.size();
  if (p_.guest_peer) {
    guest_.vcpu_tids = owner_->vcpu_tids(p_.subject);
    if (!to_guest(rec, len, guest_, batch_)) return;  // not for a guest: not counted either
  } else {
    batch_.insert(batch_.end(), rec, rec + len);
    // The sender's own process ids and CPUs stay with it.
    auto* hh = reinterpret_cast<magnet_hdr*>(batch_.data() + at);
    hh->tgid = hh->tid = 0;
    hh->cpu = 0;
  }
  if (!event_budget_.take()) {
    batch_.resize(at);
    ++events_lost_;
    ++lost_since_batch_;
    return;
  }
  ++batch_n_;
}

session_info server_session::info() const {
  session_info i;
  i.subject = p_.subject;
  i.kind = p_.kind;
  i.kind_name = p_.kind_name;
  i.peer = p_.peer;
  i.hello = hello_;
  i.subscribed = subscribed_;
  i.period_ms = subscribed_ ? sub_.period_ms : 0;
  i.mode = subscribed_ ? sub_.mode : 0;
  i.frames = frames_;
  i.bytes = bytes_;
  i.stats_replaced = stats_replaced_;
  i.events_lost = events_lost_;
  i.queued = (writing_ ? wbuf_.size() : 0) + events_bytes_;
  for (const auto* q : {&control_, &stats_})
    for (const auto& b : *q) i.queued += b.size();
  i.peer_port = p_.peer_port;
  i.bytes_in = bytes_in_;
  i.reads = reads_;
  i.read_ns = static_cast<uint64_t>(read_time_.count());
  i.pauses = pauses_;
  i.errors_unsent = errors_unsent_;
  i.paused = paused_;
  i.backoff_ms = static_cast<uint32_t>(backoff_.count());
  i.label = label_;
  return i;
}

void server_session::read() {
  auto room = rd_.prepare();
  sock_.async_read_some(asio::buffer(room.data(), room.size()),
                        [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                          self->on_read(ec, n);
                        });
}

void server_session::on_read(boost::system::error_code ec, size_t n) {
  if (closed_) return;
  if (ec) return close(ec == asio::error::eof ? "the peer closed it" : "read: " + ec.message(), false);
  const auto t0 = steady::now();
  ++reads_;
  bytes_in_ += n;
  if (!rd_.partial()) frame_start_ = t0;
  rd_.commit(n);
  if (p_.resyncable) {
    if (t0 - window_start_ >= owner_->limits().serial.window) {
      window_start_ = t0;
      strikes_ = 0;
      window_bytes_ = 0;
    }
    window_bytes_ += n;
  }
  const std::string rate_why =
      "more than " + std::to_string(owner_->limits().max_msgs_per_s) + " messages per second";
  frame f;
  error e;
  // A resynchronising peer over its budget is not served the rest of what
  // it sent: that is dropped when the channel resumes.
  while (!(p_.resyncable && over_budget())) {
    auto st = rd_.next(f, e);
    if (st == reader::state::more) break;
    if (st == reader::state::bad) {
      if (!p_.resyncable) return fail(MAGNET_VERR_BAD_FRAME, e.message);
      owner_->log(severity::warning, "bad_frame", p_.subject,
                  where() + ": " + e.message + "; resynchronising");
      answer_error(MAGNET_VERR_BAD_FRAME, e.message);
      rd_.resync();
      continue;
    }
    frame_start_ = steady::now();
    if (!msgs_.take()) {
      if (!p_.resyncable) return fail(MAGNET_VERR_RATE, rate_why);
      owner_->log(severity::warning, "rate", p_.subject,
                  where() + ": message rate above the limit, dropped");
      answer_error(MAGNET_VERR_RATE, rate_why + ": dropped");
      continue;
    }
    handle(f);
    if (closed_ || closing_) return;
  }
  read_time_ += steady::now() - t0;
  if (p_.resyncable && over_budget()) return pause();
  read();
}

bool server_session::over_budget() const {
  const auto& fl = owner_->limits().serial;
  return strikes_ >= fl.max_strikes || window_bytes_ > fl.max_bytes;
}

void server_session::answer_error(uint16_t code, const std::string& why, bool strike) {
  if (!p_.resyncable) return queue_control(errmsg{code, why});
  const auto now = steady::now();
  if (strike) ++strikes_;
  if (last_error_ != steady::time_point{} && now - last_error_ < owner_->limits().serial.error_interval) {
    ++errors_unsent_;
    ++unsent_since_error_;
    return;
  }
  last_error_ = now;
  std::string text = why;
  if (unsent_since_error_)
    text += " (and " + std::to_string(unsent_since_error_) + " more errors not sent)";
  unsent_since_error_ = 0;
  queue_control(errmsg{code, text});
}

// Stops reading a flooding channel; its bytes wait in the kernel and QEMU.
void server_session::pause() {
  const auto& fl = owner_->limits().serial;
  // A channel read for @calm without a pause behaved: it starts over.
  if (steady::now() - resumed_ >= fl.calm) backoff_ = {};
  backoff_ = backoff_.count() ? std::min(backoff_ * 2, fl.backoff_max) : fl.backoff_min;
  paused_ = true;
  ++pauses_;
  const std::string why =
      (strikes_ >= fl.max_strikes ? std::to_string(strikes_) + " bad or refused messages"
                                  : std::to_string(window_bytes_) + " bytes") +
      " within " + ms(fl.window) + ": not read for " + ms(backoff_) + ", then resynchronised";
  owner_->log(severity::warning, "flood", p_.subject, where() + ": " + why);
  answer_error(MAGNET_VERR_RATE, why, false);
  resume_.expires_after(backoff_);
  resume_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec && !self->closed_ && !self->closing_) self->resume();
  });
}

void server_session::resume() {
  paused_ = false;
  // What was left of the flood in the reader is void; the next frame is
  // found by its magic.
  rd_ = reader{};
  rd_.resync();
  window_start_ = resumed_ = steady::now();
  strikes_ = 0;
  window_bytes_ = 0;
  read();
}

void server_session::handle(frame& f) {
  const uint8_t t = f.h.type;
  if (auto* h = std::get_if<hello>(&f.m)) {
    const uint8_t v = std::min<uint8_t>(h->max_version, MAGNET_VIEW_VERSION);
    if (v < std::max<uint8_t>(h->min_version, MAGNET_VIEW_VERSION_MIN))
      return fail(MAGNET_VERR_VERSION,
                  "no common protocol version (peer " + std::to_string(h->min_version) + ".." +
                      std::to_string(h->max_version) + ", this side " +
                      std::to_string(MAGNET_VIEW_VERSION_MIN) + ".." +
                      std::to_string(MAGNET_VIEW_VERSION) + ")");
    // A hello starts over (a restarted peer on the same channel).
    hello_ = true;
    version_ = v;
    subscribed_ = false;
    disarm();
    label_ = sanitize(h->label);
    owner_->log(severity::info, "hello", p_.subject, where() + " session, peer '" + label_ + "'");
    welcome w;
    w.version = v;
    w.session_id = p_.session_id;
    queue_control(w);
    return;
  }
  if (auto* p = std::get_if<ping>(&f.m)) {
    queue_control(pong{p->token, p->sent_ns, monotonic_now_ns()});
    return;
  }
  if (auto* r = std::get_if<resync>(&f.m)) {
    if (r->reply) return;
    if (p_.resyncable) {  // a new user of the channel
      hello_ = subscribed_ = false;
      disarm();
      control_.clear();
      stats_.clear();
      events_.clear();
      events_bytes_ = 0;
    }
    queue_control(resync{r->token, true});
    return;
  }
  if (std::holds_alternative<pong>(f.m) || std::holds_alternative<errmsg>(f.m)) return;
  if (std::holds_alternative<unknown>(f.m))
    return answer_error(MAGNET_VERR_UNKNOWN_TYPE, "unknown message type " + type_name(t));
  if (t >= 0x20 && t < 0x40)
    return reject(MAGNET_VERR_BAD_FRAME, "a client does not send " + type_name(t));
  if (!hello_) return reject(MAGNET_VERR_NOT_NOW, type_name(t) + " before hello");
  if (f.h.version != version_)
    return reject(MAGNET_VERR_BAD_FRAME, "frame of version " + std::to_string(f.h.version) +
                                             " after version " + std::to_string(version_) +
                                             " was agreed");
  if (auto* s = std::get_if<subscribe>(&f.m)) {
    const published* pub = owner_->values(p_.subject);
    if (!pub) return fail(MAGNET_VERR_REFUSED, "the subject of this connection is gone");
    // Refused before it counts: the subscription in force stays.
    if (p_.guest_peer && (s->flags & MAGNET_VSUB_EVENTS))
      if (auto why = not_guest_safe(s->events); !why.empty())
        return reject(MAGNET_VERR_BAD_SUBSCRIBE, why);
    if (!owner_->allow_subscribe(p_.subject))
      return reject(MAGNET_VERR_RATE, "too many subscriptions per second");
    sub_ = std::move(*s);
    ids_ = std::set<uint16_t>(sub_.ids.begin(), sub_.ids.end());
    ev_types_ = std::set<uint16_t>(sub_.events.begin(), sub_.events.end());
    subscribed_ = ever_subscribed_ = true;
    gaps_sent_ = pub->gaps;
    last_sent_.clear();
    last_push_ = {};
    owner_->log(severity::info, "subscribe", p_.subject,
                std::to_string(sub_.ids.size()) + " stats every " + std::to_string(sub_.period_ms) +
                    " ms, mode " + std::to_string(sub_.mode) +
                    (sub_.flags & MAGNET_VSUB_EVENTS ? ", events" : ""));
    if (sub_.mode != MAGNET_VMODE_PULL) push_due();
    return;
  }
  if (std::holds_alternative<pull>(f.m)) {
    if (!subscribed_) return reject(MAGNET_VERR_NOT_NOW, "pull before subscribe");
    if (steady::now() - last_push_ < std::chrono::milliseconds(sub_.period_ms))
      return reject(MAGNET_VERR_RATE,
                    "pull more often than the period (" + std::to_string(sub_.period_ms) + " ms)");
    push_now();
    return;
  }
  reject(MAGNET_VERR_BAD_FRAME, "a client does not send " + type_name(t));
}

void server_session::reject(uint16_t code, const std::string& why) {
  if (++rejects_ > 10 && !p_.resyncable) return fail(code, why + " (too many errors: closing)");
  owner_->log(severity::warning, "rejected", p_.subject, where() + ": " + why);
  answer_error(code, why);
}

bool server_session::changed() const {
  const published* e = owner_->values(p_.subject);
  if (!e) return false;
  if (e->gaps != gaps_sent_) return true;
  size_t n = 0;
  for (const auto& v : e->stats) {
    if (!wanted(v.id)) continue;
    ++n;
    auto it = last_sent_.find({v.id, v.index});
    if (it == last_sent_.end() || it->second != (v.valid() ? v.value : -1.0)) return true;
  }
  if (wanted(MAGNET_STAT_HOST_MARKER) && e->marker) {
    ++n;
    auto it = last_sent_.find({MAGNET_STAT_HOST_MARKER, 0});
    if (it == last_sent_.end() || it->second != *e->marker) return true;
  }
  return n != last_sent_.size();
}

void server_session::push_due() {
  auto now = steady::now();
  auto period = std::chrono::milliseconds(sub_.period_ms);
  if (now - last_push_ >= period)
    push_now();
  else if (!push_armed_)
    arm(last_push_ + period);
}

void server_session::disarm() {
  push_.cancel();
  push_armed_ = false;
}

void server_session::arm(steady::time_point at) {
  push_armed_ = true;
  push_.cancel();
  push_.expires_at(at);
  push_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec) return;  // cancelled: a newer wait (or none) is in force
    self->push_armed_ = false;
    if (self->closed_ || !self->subscribed_) return;
    if (self->sub_.mode == MAGNET_VMODE_PERIODIC)
      self->push_now();
    else if (self->sub_.mode == MAGNET_VMODE_ON_CHANGE && self->changed())
      self->push_now();
  });
}

void server_session::push_now() {
  last_push_ = steady::now();
  const published* ep = owner_->values(p_.subject);
  if (!ep) return;
  const published& e = *ep;
  const uint64_t now = monotonic_now_ns();
  auto age = [&](uint64_t at) {
    return static_cast<uint32_t>(std::min<uint64_t>(now > at ? (now - at) / 1000 : 0, UINT32_MAX));
  };
  stats st;
  if (e.gaps != gaps_sent_) st.flags |= MAGNET_VSTATS_GAP;
  gaps_sent_ = e.gaps;
  // What was sent is remembered only where it decides the next push.
  const bool track = sub_.mode == MAGNET_VMODE_ON_CHANGE;
  if (track) last_sent_.clear();
  const uint32_t base_age = age(e.at_ns);
  st.values.reserve(e.stats.size() + 2);
  for (const auto& v : e.stats) {
    if (!wanted(v.id)) continue;
    stat_value x = v;
    // Ages add up along the way (a relay's values were already old).
    x.age_us = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{v.age_us} + base_age, UINT32_MAX));
    st.values.push_back(x);
    if (track) last_sent_[{v.id, v.index}] = v.valid() ? v.value : -1.0;
    if (v.id == MAGNET_STAT_HOST_MARKER && v.valid()) marker_sent_ = v.value;
  }
  if (wanted(MAGNET_STAT_LOST_DELIVERY))
    st.values.push_back({MAGNET_STAT_LOST_DELIVERY, MAGNET_VSTAT_VALID, 0, 0, 0,
                         static_cast<double>(events_lost_)});
  if (wanted(MAGNET_STAT_HOST_MARKER) && e.marker) {
    st.values.push_back({MAGNET_STAT_HOST_MARKER, MAGNET_VSTAT_VALID, 0, 0, age(e.marker_at), *e.marker});
    if (track) last_sent_[{MAGNET_STAT_HOST_MARKER, 0}] = *e.marker;
    marker_sent_ = *e.marker;
  }
  // The newest frame replaces one not yet written.
  if (!stats_.empty()) ++stats_replaced_;
  stats_.clear();
  const size_t per = max_stats_per_frame();
  size_t i = 0;
  do {
    stats part{st.flags, {}};
    const size_t end = std::min(i + per, st.values.size());
    part.values.assign(st.values.begin() + static_cast<long>(i), st.values.begin() + static_cast<long>(end));
    std::vector<uint8_t> b;
    (void)encode(b, part, ++seq_, now, version_);
    stats_.push_back(std::move(b));
    i = end;
  } while (i < st.values.size());
  if (sub_.mode == MAGNET_VMODE_PERIODIC)
    arm(last_push_ + std::chrono::milliseconds(sub_.period_ms) + slack());
  pump();
}

void server_session::flush_events() {
  if (!batch_n_) return;  // a loss alone rides on the next batch
  events ev;
  ev.n = batch_n_;
  ev.lost = static_cast<uint32_t>(std::min<uint64_t>(lost_since_batch_, UINT32_MAX));
  ev.records = std::move(batch_);
  batch_.clear();
  batch_n_ = 0;
  std::vector<uint8_t> b;
  (void)encode(b, ev, ++seq_, monotonic_now_ns(), version_);
  if (events_bytes_ + b.size() > owner_->limits().max_event_bytes) {
    events_lost_ += ev.n;
    lost_since_batch_ += ev.n;
    owner_->log(severity::warning, "slow_reader", p_.subject,
                where() + ": event batch dropped: " + std::to_string(events_bytes_) +
                    " bytes of events already wait");
    return;
  }
  lost_since_batch_ = 0;
  events_bytes_ += b.size();
  events_.push_back(std::move(b));
  pump();
}

void server_session::queue_control(const message& m) {
  if (closing_ || closed_) return;
  if (control_.size() >= 16) {  // a peer that asks faster than it reads
    if (!p_.resyncable) return fail(MAGNET_VERR_RATE, "replies not read");
    control_.pop_front();
  }
  std::vector<uint8_t> b;
  (void)encode(b, m, ++seq_, monotonic_now_ns(), hello_ ? version_ : MAGNET_VIEW_VERSION);
  control_.push_back(std::move(b));
  pump();
}

void server_session::pump() {
  if (writing_ || closed_) return;
  if (!control_.empty()) {
    wbuf_ = std::move(control_.front());
    control_.pop_front();
  } else if (closing_) {
    return close(close_why_, true);
  } else if (!stats_.empty()) {
    wbuf_ = std::move(stats_.front());
    stats_.pop_front();
  } else if (!events_.empty()) {
    wbuf_ = std::move(events_.front());
    events_.pop_front();
    events_bytes_ -= wbuf_.size();
  } else {
    return;
  }
  writing_ = true;
  write_start_ = steady::now();
  asio::async_write(sock_, asio::buffer(wbuf_),
                    [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                      self->writing_ = false;
                      if (self->closed_) return;
                      if (ec) return self->close("write: " + ec.message(), false);
                      ++self->frames_;
                      self->bytes_ += n;
                      self->pump();
                    });
}

}  // namespace magnet::view
