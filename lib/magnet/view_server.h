// The server side of one view-protocol connection (proto/magnet/view.h),
// shared by the host daemon (a VM's connections: vsock, virtio-serial) and
// the guest agent (local applications).  Runs on the owner's io_context.
//
// Everything per connection is bounded: the newest stats frame replaces an
// unsent older one, event batches are bounded in bytes and in records per
// second (what does not fit is counted as lost and reported in the next
// batch), at most 16 replies wait, and there are hello, frame and write
// deadlines and a message rate.  A resynchronising connection (a
// virtio-serial channel, which outlives its users) answers bad bytes with
// an error and looks for the next frame instead of closing; one that keeps
// misbehaving is not read for a while (flood_limits).
//
// A session whose peer is a guest (the host daemon's) hands it event records
// only through the guest schema (magnet/guest_schema.h): refused types never,
// the others cleaned field by field, with ids re-keyed under a key of the
// session's own.  The guest agent's sessions for local applications relay
// records that were cleaned so already.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <utility>  // before asio: Boost 1.74 forgets it for C++20

#include <boost/asio.hpp>

#include "magnet/guest_schema.h"
#include "magnet/log.h"
#include "magnet/view_codec.h"

namespace magnet::view {

using steady = std::chrono::steady_clock;

// What a resynchronising peer (a virtio-serial channel: never closed for
// bad bytes, see server_session) may cost its server.  Every message that
// earns an error (a bad frame, a message over the rate, a refused one) is
// a strike.  @max_strikes strikes, or more than @max_bytes read, within one
// @window stop the reading of that channel for a backoff that doubles from
// @backoff_min to @backoff_max, after which it is resynchronised; after
// @calm of reading without a pause the backoff starts over.  Meanwhile its
// bytes stay in the kernel's and QEMU's buffers (the guest's writes block),
// not in the server.  Its error frames: at most one per @error_interval,
// the next one saying how many were not sent.
//
// A well-behaved peer is far from these: the agent sends a resync every
// 250 ms until answered, then a hello, a subscribe (under 1 KiB) and a
// ping a second.  Bytes that are no frame cost little to skip (a few
// milliseconds per MiB, reads included) but strike only once per run, so
// @max_bytes is what bounds them; it is large enough that what a flood
// left in the buffers is skipped in one or two spells when it ends, so the
// VM's own agent is not kept waiting for long.
struct flood_limits {
  unsigned max_strikes = 8;
  size_t max_bytes = 1u << 20;
  std::chrono::milliseconds window{1000};
  std::chrono::milliseconds backoff_min{100}, backoff_max{5000};
  std::chrono::milliseconds calm{10000};
  std::chrono::milliseconds error_interval{1000};
};

struct server_limits {
  std::chrono::milliseconds hello_deadline{5000};  // non-resynchronising: hello after connect
  // Non-resynchronising: a subscribe within this of connecting (0: none).
  // The host's vsock peers hold one of their VM's few connection slots.
  std::chrono::milliseconds subscribe_deadline{0};
  std::chrono::milliseconds frame_deadline{1000};  // a frame's bytes, first to last
  std::chrono::milliseconds write_deadline{5000};  // one write in flight
  unsigned max_msgs_per_s = 50;                    // burst twice that
  size_t max_event_bytes = 256u << 10;             // queued event batches
  uint32_t max_events_per_s = 20000;               // event records
  flood_limits serial;                             // resynchronising sessions
};

// What a server publishes for one subject (a VM on the host; the guest's
// view in the agent).
struct published {
  std::vector<stat_value> stats;
  uint64_t at_ns = 0;  // when the values were current (sender's clock)
  std::optional<double> marker;
  uint64_t marker_at = 0;
  uint64_t gaps = 0;   // bumped when values went missing: next frames say MAGNET_VSTATS_GAP
};

struct token_bucket {
  double rate = 1, burst = 1, tokens = 1;
  steady::time_point last = steady::now();
  token_bucket() = default;
  token_bucket(double r, double b, steady::time_point now = steady::now())
      : rate(r), burst(b), tokens(b), last(now) {}
  bool take(double n = 1) { return take_at(steady::now(), n); }
  bool take_at(steady::time_point now, double n = 1);
};

// At most a few lines per message id and subject every ten seconds; the
// rest are counted and summarised when the window rolls over.  Bounded in
// memory whatever peers do.
class log_limiter {
 public:
  using sink = void (*)(severity level, const std::string& line);
  explicit log_limiter(sink s, std::string prefix) : sink_(s), prefix_(std::move(prefix)) {}
  void line(severity level, const std::string& id, const std::string& subject, const std::string& text);

 private:
  struct entry {
    steady::time_point start{};
    uint64_t lines = 0, suppressed = 0;
  };
  sink sink_;
  std::string prefix_;
  std::map<std::pair<std::string, std::string>, entry> seen_;
};

class server_session;

class session_owner {
 public:
  virtual ~session_owner() = default;
  virtual boost::asio::io_context& io() = 0;
  virtual const server_limits& limits() const = 0;
  // The subject's values (null: it is gone).
  virtual const published* values(uint32_t subject) const = 0;
  // Subscriptions per second of the subject (all its connections).
  virtual bool allow_subscribe(uint32_t subject) = 0;
  virtual void log(severity level, const std::string& id, uint32_t subject, const std::string& text) = 0;
  // The host tids of the subject's vCPU threads: a guest peer's sched.*
  // records are its own vCPUs' only (null: none known, so none is sent).
  virtual const std::set<uint32_t>* vcpu_tids(uint32_t subject) const {
    (void)subject;
    return nullptr;
  }
  // The session closed; called once, from its handler (defer the erase).
  virtual void forget(const server_session* s) = 0;
};

struct session_info {
  uint32_t subject = 0;
  int kind = 0;
  std::string kind_name;
  uint32_t peer = 0;  // what the owner knows of the peer (a CID, a uid)
  uint32_t peer_port = 0;  // vsock: the peer's source port
  bool hello = false, subscribed = false;
  uint32_t period_ms = 0;
  uint8_t mode = 0;
  uint64_t frames = 0, bytes = 0, stats_replaced = 0, events_lost = 0;
  size_t queued = 0;  // bytes waiting in the server for this connection
  // What the peer cost the server: its bytes read, reads, time in their
  // handling; pauses of a flooding resynchronising peer, and error frames
  // not sent to it (flood_limits).
  uint64_t bytes_in = 0, reads = 0, read_ns = 0, pauses = 0, errors_unsent = 0;
  bool paused = false;
  uint32_t backoff_ms = 0;  // the last pause's length
  std::string label;
};

class server_session : public std::enable_shared_from_this<server_session> {
 public:
  using socket = boost::asio::generic::stream_protocol::socket;
  struct params {
    uint32_t subject = 0;
    uint64_t session_id = 0;
    int kind = 0;
    std::string kind_name;
    uint32_t peer = 0;
    bool resyncable = false;
    // The peer is a guest: event types and fields per the guest schema.
    bool guest_peer = false;
    uint32_t peer_port = 0;
  };
  server_session(std::shared_ptr<session_owner> owner, socket s, params p);

  // Draws the session's key (guest peers), then reads.
  void start();
  void close(const std::string& why, bool warn);
  // Tells the peer why (an ERROR frame), then closes.
  void fail(uint16_t code, const std::string& why);
  // Deadlines and partial event batches; the owner calls it every ~100 ms.
  void check(steady::time_point now);
  // The subject's values changed: on-change subscribers get a frame.
  void publish();
  // One event record of the subject (magnet_hdr + payload).
  void add_event(const uint8_t* rec, size_t len);

  session_info info() const;
  uint32_t subject() const { return p_.subject; }
  uint64_t session_id() const { return p_.session_id; }
  int kind() const { return p_.kind; }
  uint32_t peer() const { return p_.peer; }
  bool closed() const { return closed_; }
  // Closed, or closing after its last error frame.
  bool ending() const { return closed_ || closing_; }
  // It subscribed at least once: the subscribe deadline is met.
  bool has_subscribed() const { return ever_subscribed_; }
  steady::time_point opened() const { return opened_; }

 private:
  void read();
  void on_read(boost::system::error_code ec, size_t n);
  void handle(frame& f);
  void reject(uint16_t code, const std::string& why);
  // An error frame for the peer's bad input; on a resynchronising session
  // a strike, and sent at most once per flood_limits::error_interval.
  void answer_error(uint16_t code, const std::string& why, bool strike = true);
  bool over_budget() const;
  void pause();
  void resume();
  bool marker_changed() const;
  std::chrono::milliseconds slack() const;
  bool changed() const;
  // Subscribed to, and for a guest peer a stat the guest schema lets it see.
  bool wanted(uint16_t id) const {
    return (ids_.empty() || ids_.count(id)) && (!p_.guest_peer || guest_safe_stat(id));
  }
  void push_due();
  void disarm();
  void arm(steady::time_point at);
  void push_now();
  void flush_events();
  void queue_control(const message& m);
  void pump();
  std::string where() const { return p_.kind_name; }

  std::shared_ptr<session_owner> owner_;
  socket sock_;
  params p_;
  boost::asio::steady_timer push_;
  reader rd_;
  bool hello_ = false, subscribed_ = false, closed_ = false, closing_ = false;
  bool ever_subscribed_ = false;
  bool writing_ = false, push_armed_ = false;
  uint8_t version_ = MAGNET_VIEW_VERSION;
  subscribe sub_;
  std::set<uint16_t> ids_, ev_types_;
  std::map<std::pair<uint16_t, uint32_t>, double> last_sent_;  // on-change mode only
  std::optional<double> marker_sent_;
  uint64_t gaps_sent_ = 0;
  std::string label_, close_why_;
  uint32_t seq_ = 0;
  unsigned rejects_ = 0;
  token_bucket msgs_, event_budget_;
  steady::time_point opened_, frame_start_, write_start_, last_push_{};
  std::deque<std::vector<uint8_t>> control_, stats_, events_;
  size_t events_bytes_ = 0;
  std::vector<uint8_t> wbuf_, batch_;
  uint32_t batch_n_ = 0;
  uint64_t lost_since_batch_ = 0;
  uint64_t frames_ = 0, bytes_ = 0, stats_replaced_ = 0, events_lost_ = 0;
  uint64_t bytes_in_ = 0, reads_ = 0, pauses_ = 0, errors_unsent_ = 0;
  std::chrono::nanoseconds read_time_{0};
  // Resynchronising sessions: the flood guard (flood_limits).
  boost::asio::steady_timer resume_;
  bool paused_ = false;
  unsigned strikes_ = 0;
  size_t window_bytes_ = 0;
  uint64_t unsent_since_error_ = 0;
  steady::time_point window_start_{}, resumed_{}, last_error_{};
  std::chrono::milliseconds backoff_{0};
  guest_context guest_;  // guest peers: the key of this session's ids
};

uint64_t monotonic_now_ns();

}  // namespace magnet::view
