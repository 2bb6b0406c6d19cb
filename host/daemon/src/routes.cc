// The HTTP side of the daemon (--http): the operator's /metrics, and the
// live dashboard's page, JSON and event streams, each cut down to what the
// asker's token may see (magnet/http/dashboard.h).
#include <time.h>

#include <cstdio>

#include "host_daemon.h"
#include "magnet/log.h"

namespace magnet::host {

// --http: /metrics for operators, and the dashboard (serve_dashboard).
// False when the address cannot be bound (the error is printed).
bool host_daemon::serve_http() {
  http_options ho;
  ho.hosts = opt_.http_hosts;
  auto h = http_server::open(io_, *opt_.http, ho);
  if (!h) {
    log_error("magnet host: " + h.err().message);
    return false;
  }
  http_ = std::move(*h);
  http_->route("/metrics", [this](const http_request& r) {
    auto a = authorize(opt_.http_tokens, r);
    if (!a.who) return a.refusal;
    // A tenant's scrape would carry host-wide series too: /metrics is the
    // operator's (docs/dashboard.md).
    if (!a.who->all) return forbidden("/metrics (the host's metrics are for operator tokens)");
    return metrics_page(r);
  });
  serve_dashboard();
  const http_endpoint at = http_->local_endpoint();
  log_notice("magnet-host: [http] serving /metrics on http://" + at.text() + "/metrics" +
                  (at.loopback ? "" : " (not loopback: only with a token of --http-tokens)"));
  log_notice("magnet-host: [http] dashboard on http://" + at.text() + "/" +
                  (opt_.http_tokens.empty() ? std::string(" (no tokens: loopback only)")
                                            : " (" + std::to_string(opt_.http_tokens.tokens.size()) +
                                                  " tokens of --http-tokens)"));
  std::string names;
  for (const auto& n : http_->host_names()) names += (names.empty() ? "" : ", ") + n.text();
  log_notice("magnet-host: [http] answering requests whose Host is " + names + " (more: --http-host)");
  return true;
}

// From what the daemon holds (the last tick's counters, the registry's last
// pass): no libvirt call, no kernel map read.
http_response host_daemon::metrics_page(const http_request& r) const {
  exposition_input in;
  in.vms.reserve(vms_.size());
  for (const auto& [id, vm] : vms_) {
    auto c = counters_.find(id);
    in.vms.push_back({vm.name, vm.uuid, id, c == counters_.end() ? nullptr : &c->second, totals_.find(id)});
  }
  in.records = cons_->records();
  in.lost = cons_->lost();
  in.resident_bytes = resident_memory_bytes();
  in.libvirt_connected = reg_.connected();
  in.detail = opt_.metrics_detail;
  power_figures(in);
  const exposition f = negotiate_exposition(r.header("Accept"));
  return {200, std::string(content_type(f)), render_metrics(in, f)};
}

// What `magnet top` shows (top_json, the same vm_metrics values), per VM
// with its UUID, the median queueing delays and the exits by reason.
ojson host_daemon::dashboard_json() const {
  ojson top = top_json();
  ojson vms = ojson::array();
  for (auto row : top["vms"]) {
    const uint32_t id = row["vm"].get<uint32_t>();
    auto it = vms_.find(id);
    row["uuid"] = it != vms_.end() ? it->second.uuid : "";
    row["queue_tx_p50_us"] = metrics_.value(id, MAGNET_STAT_QUEUE_TX_P50);
    row["queue_rx_p50_us"] = metrics_.value(id, MAGNET_STAT_QUEUE_RX_P50);
    ojson exits = ojson::array();
    const ojson kvm = kvm_json(id);  // kept: a range-for over kvm_json(id)["exits"] would outlive it
    for (const auto& e : kvm["exits"])
      exits.push_back(ojson{{"reason", e["reason"]}, {"per_s", e["exits_per_s"]}});
    row["exits_by_reason"] = std::move(exits);
    const auto j = vm_joules(id);  // with power_watts (top's): null without a power source
    row["energy_joules"] = j ? ojson(*j) : ojson(nullptr);
    vms.push_back(std::move(row));
  }
  timespec wall{};
  clock_gettime(CLOCK_REALTIME, &wall);
  return ojson{{"at_ms", metrics_.sampled_at() / 1000000},  // the sample's time (monotonic)
               {"wall_ms", uint64_t(wall.tv_sec) * 1000 + uint64_t(wall.tv_nsec) / 1000000},  // for charts
               {"lost", top["lost"]},
               {"libvirt", top["libvirt"]},
               {"power", host_power_json()},  // the host's: operators only (for_access)
               {"vms", std::move(vms)}};
}

// Each open stream gets the sample its token may see; the JSON is made
// once per distinct access, not per browser.
void host_daemon::push_streams() {
  std::erase_if(streams_, [](const stream_peer& p) { return !p.s->open(); });
  if (streams_.empty()) return;
  const ojson all = dashboard_json();
  std::map<std::pair<bool, std::string>, std::string> cut;
  const uint64_t id = ++stream_seq_;
  for (auto& p : streams_) {
    auto [it, fresh] = cut.try_emplace({p.who.all, p.who.vm});
    if (fresh) it->second = dump(for_access(all, p.who));
    p.s->push(sse_event{id, "sample", it->second});
  }
}

void host_daemon::serve_dashboard() {
  const auto json_reply = [](const ojson& j) {
    return http_response{200, "application/json", dump(j) + "\n", {{"Cache-Control", "no-store"}}};
  };
  // The page and its files: no VM data in them, but behind the token too.
  const auto asset = [this](const http_request& r) {
    auto a = authorize(opt_.http_tokens, r);
    if (!a.who) return a.refusal;
    const embedded_asset* f = find_dashboard_asset(r.path);
    if (!f) return http_response{404, "text/plain; charset=utf-8", "no such path: " + r.path + "\n"};
    http_response res{200, f->content_type, std::string(reinterpret_cast<const char*>(f->data), f->size)};
    res.headers.emplace_back("Cache-Control", "no-cache");
    if (r.path == "/")
      res.headers.emplace_back("Content-Security-Policy",
                               "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'");
    return res;
  };
  http_->route("/", asset);
  http_->route_prefix("/assets/", asset);
  http_->route("/api/vms", [this, json_reply](const http_request& r) {
    auto a = authorize(opt_.http_tokens, r);
    if (!a.who) return a.refusal;
    ojson j = for_access(dashboard_json(), *a.who);
    j["scope"] = a.who->all ? "all" : "vm";
    return json_reply(j);
  });
  // /api/vm/NAME/views: that VM's view instances (`magnet views --vm NAME`).
  http_->route_prefix("/api/vm/", [this](const http_request& r) {
    auto a = authorize(opt_.http_tokens, r);
    if (!a.who) return a.refusal;
    std::string rest = r.path.substr(std::string("/api/vm/").size());
    const size_t slash = rest.find('/');
    if (slash == std::string::npos || rest.substr(slash) != "/views")
      return http_response{404, "text/plain; charset=utf-8", "no such path: " + r.path + "\n"};
    const std::string key = url_decode(rest.substr(0, slash));
    const vm_info* vm = find_vm(key);
    // A tenant learns nothing of other VMs, not even whether they run.
    if (!vm || !a.who->may_see(vm->name, vm->uuid)) {
      if (!a.who->all) return forbidden("VM '" + key + "'");
      return http_response{404, "text/plain; charset=utf-8", "no running VM named '" + key + "'\n"};
    }
    return http_response{200, "application/json", filters::to_json(eng_.snapshot_vm(vm->vm_id)) + "\n",
                         {{"Cache-Control", "no-store"}}};
  });
  http_->route_stream("/api/stream", [this](const http_request& r) {
    stream_reply rep;
    auto a = authorize(opt_.http_tokens, r);
    if (!a.who) {
      rep.refuse = a.refusal;
      return rep;
    }
    // A token's streams count together (http_options::max_streams_per_share);
    // without tokens there is no one to tell apart, the total bounds them.
    if (a.who->token_line > 0) rep.share = "token line " + std::to_string(a.who->token_line);
    rep.on_open = [this, who = *a.who](std::shared_ptr<http_stream> s) {
      // The newest sample at once, then one every --http-stream-interval.
      s->push(sse_event{stream_seq_, "sample", dump(for_access(dashboard_json(), who))});
      streams_.push_back({std::move(s), who});
    };
    return rep;
  });
}

}  // namespace magnet::host
