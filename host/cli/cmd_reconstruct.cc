// magnet reconstruct: application message sequences rebuilt from the TCP
// segments of a pcap file or a magnet trace (host/reconstruct,
// docs/reconstruct.md).
#include <charconv>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "magnet/text.h"
#include "magnet/reconstruct/readers.h"
#include "magnet/reconstruct/reconstruct.h"

namespace magnet::host {

static const char* kReconstructHelp =
    "Usage: magnet reconstruct FILE [--format csv|json] [--runs LIST] [--gap-ms N] [--summary]\n"
    "\n"
    "The application messages of each TCP connection in FILE, rebuilt from its\n"
    "segments alone (docs/reconstruct.md): connections separated, bytes sent\n"
    "again dropped and missing ones filled, then cut into messages after a\n"
    "segment with PSH or FIN, after one shorter than the direction's largest\n"
    "(only where the sender sets no PSH), and where the direction turns.\n"
    "FILE is a pcap file (Ethernet, Linux cooked or raw IP; IPv4 and IPv6) or\n"
    "a magnet trace with device-layer packet records (net.dev.xmit/recv).\n"
    "\n"
    "  -F, --format FMT  csv (default): a header row, then one line per message:\n"
    "                    stream, its ends a and b, vm, direction (a>b, b>a),\n"
    "                    size, first_ns, last_ns, segments, gap (1: it holds\n"
    "                    bytes the capture missed); json: every stream with\n"
    "                    its messages and the summary\n"
    "      --runs LIST   more captures of the same program, named A,B,...: the\n"
    "                    connections are matched by the order they start in,\n"
    "                    and a message cut is kept where more than half of the\n"
    "                    runs (FILE and these) make it; times are FILE's\n"
    "      --gap-ms N    a pause of more than N ms inside a message ends it\n"
    "                    (default 0: pauses cut nothing)\n"
    "      --summary     the table of messages against segments per direction:\n"
    "                    count, mean and median size and interval (csv: this\n"
    "                    table instead of the messages)\n"
    "\n"
    "A truncated capture gives the messages before the cut, with a note on\n"
    "stderr (json: \"partial\").  Exit status: 0 done, 1 FILE unreadable or not\n"
    "a capture with TCP segments (named on stderr), 2 a usage error.\n";

namespace {

namespace rc = reconstruct;

struct reconstruct_args {
  std::vector<std::string> files;  // the runs, FILE first
  bool json = false, summary = false;
  rc::cut_options cut;
};

reconstruct_args parse_reconstruct_args(cli::args& a) {
  reconstruct_args r;
  const auto fmt = a.value("--format", "-F").value_or("csv");
  if (fmt != "csv" && fmt != "json") throw cli::usage_error("--format: '" + fmt + "' is not one of csv, json");
  r.json = fmt == "json";
  r.summary = a.flag("--summary");
  const auto runs = a.value("--runs");
  if (auto g = a.value("--gap-ms")) {
    uint64_t ms = 0;
    auto [end, ec] = std::from_chars(g->data(), g->data() + g->size(), ms);
    if (g->empty() || ec != std::errc() || end != g->data() + g->size() || ms > 3'600'000)
      throw cli::usage_error("--gap-ms: '" + *g + "' is not a whole number of milliseconds (0 to 3600000)");
    r.cut.gap_ns = ms * 1'000'000;
  }
  r.files = a.finish(1, 1, "capture FILE");
  if (runs) {
    for (const auto& f : split(*runs)) {
      if (f.empty()) throw cli::usage_error("--runs: '" + *runs + "' has an empty name");
      r.files.push_back(f);
    }
  }
  return r;
}

bool is_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw fatal(error::from_errno(path).message);
  char magic[8] = {};
  in.read(magic, sizeof magic);
  return in.gcount() == 8 && std::string(magic, 8) == "MAGNETTR";
}

// One run: its streams, sanitised, and their messages.
struct run {
  std::vector<rc::stream> streams;
  std::vector<std::vector<rc::message>> messages;
  bool partial = false;
};

run read_run(const std::string& path, const rc::cut_options& o) {
  auto c = is_trace(path) ? rc::read_trace(path) : rc::read_pcap(path);
  if (!c) throw fatal(c.err().message);
  if (c->partial) std::fprintf(stderr, "magnet reconstruct: %s (partial result)\n", c->note.c_str());
  if (c->packets.empty()) throw fatal(path + ": no TCP segment over IPv4 or IPv6");
  run r;
  r.partial = c->partial;
  r.streams = rc::separate(c->packets);
  for (auto& s : r.streams) {
    rc::sanitise(s);
    r.messages.push_back(rc::cut(s, o));
  }
  return r;
}

// The runs' messages, stream by stream in order of start, into the first.
void reconcile_into(run& first, const std::vector<run>& others, const std::vector<std::string>& files) {
  size_t n = first.streams.size();
  for (size_t i = 0; i < others.size(); ++i) {
    if (others[i].streams.size() != n)
      std::fprintf(stderr, "magnet reconstruct: %s has %zu connections, %s %zu: the first %zu are matched\n",
                   files[i + 1].c_str(), others[i].streams.size(), files[0].c_str(), n,
                   std::min(n, others[i].streams.size()));
    n = std::min(n, others[i].streams.size());
  }
  first.streams.resize(n);
  first.messages.resize(n);
  for (size_t s = 0; s < n; ++s) {
    std::vector<std::vector<rc::message>> runs{first.messages[s]};
    for (const auto& o : others) runs.push_back(o.messages[s]);
    first.messages[s] = rc::reconcile(runs);
  }
}

nlohmann::ordered_json figures_json(const rc::figures& f) {
  return {{"count", f.count},
          {"mean_size", f.mean_size},
          {"median_size", f.median_size},
          {"mean_interval_ns", f.mean_interval_ns},
          {"median_interval_ns", f.median_interval_ns}};
}

nlohmann::ordered_json stream_json(const rc::stream& s, const std::vector<rc::message>& msgs) {
  nlohmann::ordered_json j{{"a", rc::to_string(s.a)}, {"b", rc::to_string(s.b)},    {"vm", s.vm_id},
                           {"partial", s.partial},    {"dropped", s.dropped},       {"filled_bytes", s.filled_bytes},
                           {"messages", nlohmann::ordered_json::array()}};
  for (const auto& m : msgs)
    j["messages"].push_back({{"direction", rc::to_string(m.dir)}, {"size", m.size}, {"first_ns", m.first_ns},
                             {"last_ns", m.last_ns}, {"segments", m.segments}, {"gap", m.gap}});
  j["summary"] = nlohmann::ordered_json::array();
  for (const auto& row : rc::summarise(s, msgs))
    j["summary"].push_back({{"direction", rc::to_string(row.dir)},
                            {"messages", figures_json(row.messages)},
                            {"segments", figures_json(row.segments)}});
  return j;
}

void print_csv(const run& r, bool summary) {
  if (summary)
    std::puts("stream,a,b,vm,direction,level,count,mean_size,median_size,mean_interval_ns,median_interval_ns");
  else
    std::puts("stream,a,b,vm,direction,size,first_ns,last_ns,segments,gap");
  for (size_t i = 0; i < r.streams.size(); ++i) {
    const auto& s = r.streams[i];
    const std::string head = std::to_string(i) + "," + rc::to_string(s.a) + "," + rc::to_string(s.b) + "," +
                             std::to_string(s.vm_id) + ",";
    if (!summary) {
      for (const auto& m : r.messages[i])
        std::printf("%s%s,%llu,%llu,%llu,%u,%d\n", head.c_str(), rc::to_string(m.dir),
                    static_cast<unsigned long long>(m.size), static_cast<unsigned long long>(m.first_ns),
                    static_cast<unsigned long long>(m.last_ns), m.segments, m.gap ? 1 : 0);
      continue;
    }
    for (const auto& row : rc::summarise(s, r.messages[i]))
      for (const auto& [level, f] : {std::pair{"messages", row.messages}, std::pair{"segments", row.segments}})
        std::printf("%s%s,%s,%llu,%.1f,%.1f,%.0f,%.0f\n", head.c_str(), rc::to_string(row.dir), level,
                    static_cast<unsigned long long>(f.count), f.mean_size, f.median_size, f.mean_interval_ns,
                    f.median_interval_ns);
  }
}

}  // namespace

int cmd_reconstruct(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kReconstructHelp, stdout);
    return 0;
  }
  const auto p = parse_reconstruct_args(a);
  run first = read_run(p.files[0], p.cut);
  std::vector<run> others;
  for (size_t i = 1; i < p.files.size(); ++i) others.push_back(read_run(p.files[i], p.cut));
  if (!others.empty()) reconcile_into(first, others, p.files);
  if (!p.json) {
    print_csv(first, p.summary);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  nlohmann::ordered_json j{{"file", p.files[0]}, {"runs", p.files}, {"partial", first.partial},
                           {"streams", nlohmann::ordered_json::array()}};
  for (const auto& o : others) j["partial"] = j["partial"].get<bool>() || o.partial;
  for (size_t i = 0; i < first.streams.size(); ++i) j["streams"].push_back(stream_json(first.streams[i], first.messages[i]));
  // A file name need not be UTF-8: its bad bytes are replaced, not fatal.
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace magnet::host
