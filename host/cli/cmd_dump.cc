#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "commands.h"
#include "magnet/export/perfetto.h"
#include "magnet/export/ulm.h"
#include "magnet/events.h"
#include "magnet/record.h"
#include "magnet/trace_file.h"

namespace magnet::host {

static const char* kDumpHelp =
    "Usage: magnet dump FILE [--format text|csv|json|ulm|perfetto] [-o OUT] [--json]\n"
    "\n"
    "Prints a trace file written by 'magnet record'.  The whole file is\n"
    "checked first: a corrupt or truncated file prints nothing but an error.\n"
    "\n"
    "  -F, --format FMT  the output format (default text):\n"
    "      text      one line per record\n"
    "      csv       header row: ts_ns,cpu,event,vm,tgid,tid,abstract_id,size,\n"
    "                flags, then every payload field (empty where a record has none)\n"
    "      json      JSON Lines: one object per record, the sysinfo record first\n"
    "      ulm       NetLogger ULM lines, as MAGNeT exported them: DATE (UTC) HOST\n"
    "                PROG NL.EVNT LVL, then VM TGID TID CPU FLOW|ID SIZE and the\n"
    "                payload fields\n"
    "      perfetto  a Perfetto trace (protobuf) for ui.perfetto.dev: tracks per\n"
    "                CPU, per VM and vCPU, packets' journeys across layers as\n"
    "                flows, tap bytes/s per VM; needs -o (binary; '-o -' writes\n"
    "                to standard output when that is not a terminal)\n"
    "  -o, --output OUT  write there instead of standard output\n"
    "      --json        the same as --format json\n"
    "\n"
    "Traces written on a machine of the other endianness are converted.\n";

namespace {

// Where dump writes: standard output or -o OUT, opened only once the trace
// is known good, so that a bad trace leaves no file behind.
class dump_output {
 public:
  explicit dump_output(std::optional<std::string> path) : path_(std::move(path)) {}
  bool named() const { return path_.has_value(); }  // -o given
  bool to_stdout() const { return !path_ || *path_ == "-"; }
  std::string where() const { return to_stdout() ? "standard output" : *path_; }
  bool open(bool binary) {
    if (to_stdout()) return true;
    file_.reset(std::fopen(path_->c_str(), binary ? "wb" : "w"));
    if (!file_) {
      std::fprintf(stderr, "magnet dump: %s\n", error::from_errno("cannot create " + *path_).message.c_str());
      return false;
    }
    out_ = file_.get();
    return true;
  }
  std::FILE* out() const { return out_; }
  // A partial output is removed, but only a regular file: OUT may be a
  // device or a FIFO (/dev/full, a named pipe), which is not ours to unlink.
  void discard() {
    struct stat st {};
    if (file_ && fstat(fileno(file_.get()), &st) == 0 && S_ISREG(st.st_mode)) std::remove(path_->c_str());
  }
  // The exit status: 0 when everything reached the output.
  int finish(bool ok) {
    ok = std::fflush(out_) == 0 && ok;
    if (!ok && !to_stdout()) {
      std::fprintf(stderr, "magnet dump: %s\n", error::from_errno("cannot write " + *path_).message.c_str());
      discard();
    }
    return ok ? 0 : 1;
  }

 private:
  std::optional<std::string> path_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_{nullptr, std::fclose};
  std::FILE* out_ = stdout;
};

int write_perfetto(trace_reader& r, dump_output& o) {
  auto st = export_perfetto(r, o.out());
  if (!st) {
    std::fprintf(stderr, "magnet dump: %s\n",
                 st.err().code ? error::from_errno("cannot write " + o.where(), st.err().code).message.c_str()
                               : st.err().message.c_str());
    o.discard();
    return 1;
  }
  return o.finish(true);
}

int write_ulm(trace_reader& r, dump_output& o) {
  for (;;) {
    auto rec = r.next();
    if (!rec) {
      std::fprintf(stderr, "magnet dump: %s\n", rec.err().message.c_str());
      return 1;
    }
    if (!*rec) break;
    auto line = ulm_line(*rec, r.sysinfo());
    if (line.empty()) continue;
    line += '\n';
    if (std::fwrite(line.data(), 1, line.size(), o.out()) != line.size()) return o.finish(false);
  }
  return o.finish(true);
}

int write_records(trace_reader& r, out_format fmt, dump_output& o) {
  const auto& si = r.sysinfo();
  if (fmt == out_format::csv) std::fprintf(o.out(), "%s\n", csv_header().c_str());
  if (fmt == out_format::text)
    std::fprintf(o.out(), "# magnet trace format %u.%u, host %s, kernel %s, %u cpus, %s%s, "
                "realtime offset %lld ns\n",
                si.format_major, si.format_minor, si.hostname, si.kernel_release, si.ncpus,
                si.tool_version, r.foreign_endian() ? ", other-endian (converted)" : "",
                static_cast<long long>(si.realtime_offset_ns));
  for (;;) {
    auto rec = r.next();
    if (!rec) {  // validated before, so only an I/O change under us gets here
      std::fprintf(stderr, "magnet dump: %s\n", rec.err().message.c_str());
      return 1;
    }
    if (!*rec) break;
    uint16_t t = hdr_of(*rec).type;
    if (t == MAGNET_EV_EVENT_DESC) continue;
    if (t == MAGNET_EV_SYSINFO && fmt != out_format::json) continue;
    std::fputs(format_record(*rec, fmt).c_str(), o.out());
    std::fputc('\n', o.out());
  }
  return o.finish(!std::ferror(o.out()));
}

}  // namespace

int cmd_dump(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kDumpHelp, stdout);
    return 0;
  }
  const bool json = a.flag("--json");
  auto fmt_s = a.value("--format", "-F").value_or(json ? "json" : "text");
  if (json && fmt_s != "json") throw cli::usage_error("--json and --format " + fmt_s + " disagree");
  dump_output o(a.value("--output", "-o"));
  auto pos = a.finish(1, 1, "trace FILE");
  out_format fmt = out_format::text;
  const bool ulm = fmt_s == "ulm", perfetto = fmt_s == "perfetto";
  if (fmt_s == "csv") fmt = out_format::csv;
  else if (fmt_s == "json") fmt = out_format::json;
  else if (fmt_s != "text" && !ulm && !perfetto)
    throw cli::usage_error("--format: '" + fmt_s + "' is not one of text, csv, json, ulm, perfetto");
  if (perfetto && !o.named())
    throw cli::usage_error("--format perfetto writes a binary file: name it with -o OUT "
                           "('-o -' for standard output, not a terminal)");
  if (perfetto && o.to_stdout() && isatty(STDOUT_FILENO))
    throw cli::usage_error("--format perfetto: standard output is a terminal; "
                           "redirect it or name a file with -o OUT");
  auto r = trace_reader::open(pos[0]);
  if (!r) {
    std::fprintf(stderr, "magnet dump: %s\n", r.err().message.c_str());
    return 1;
  }
  if (auto n = r->validate(); !n) {
    std::fprintf(stderr, "magnet dump: %s\n", n.err().message.c_str());
    return 1;
  }
  if (!o.open(perfetto)) return 1;
  if (perfetto) return write_perfetto(*r, o);
  if (ulm) return write_ulm(*r, o);
  return write_records(*r, fmt, o);
}

}  // namespace magnet::host
