#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "magnet/export/perfetto.h"
#include "magnet/export/ulm.h"
#include "magnet/events.h"
#include "magnet/record.h"
#include "magnet/trace_file.h"

namespace magnet::host {

static const char* kDumpHelp =
    "Usage: magnet dump FILE [--format text|csv|json|ulm|perfetto] [-o OUT]\n"
    "\n"
    "Prints a trace file written by 'magnet record'.  The whole file is\n"
    "checked first: a corrupt or truncated file prints nothing but an error.\n"
    "  text  one line per record (default)\n"
    "  csv   header row: ts_ns,cpu,event,vm,tgid,tid,abstract_id,size,flags,\n"
    "        then every payload field (empty where a record has none)\n"
    "  json  JSON Lines: one object per record, the sysinfo record first\n"
    "  ulm   NetLogger ULM lines, as MAGNeT exported them: DATE (UTC) HOST PROG\n"
    "        NL.EVNT LVL, then VM TGID TID CPU FLOW|ID SIZE and the payload fields\n"
    "  perfetto  a Perfetto trace (protobuf) for ui.perfetto.dev: tracks per CPU,\n"
    "        per VM and vCPU, packets' journeys across layers as flows, tap\n"
    "        bytes/s per VM; needs -o (binary; '-o -' writes to standard output\n"
    "        when that is not a terminal)\n"
    "  -o, --output OUT  write there instead of standard output\n"
    "Traces written on a machine of the other endianness are converted.\n";

int cmd_dump(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kDumpHelp, stdout);
    return 0;
  }
  auto fmt_s = a.value("--format", "-F").value_or("text");
  auto out_path = a.value("--output", "-o");
  auto pos = a.finish(1, 1, "trace FILE");
  out_format fmt = out_format::text;
  const bool ulm = fmt_s == "ulm", perfetto = fmt_s == "perfetto";
  if (fmt_s == "text") fmt = out_format::text;
  else if (fmt_s == "csv") fmt = out_format::csv;
  else if (fmt_s == "json") fmt = out_format::json;
  else if (!ulm && !perfetto)
    throw cli::usage_error("--format: '" + fmt_s +
                           "' is not one of text, csv, json, ulm, perfetto");
  if (perfetto && !out_path)
    throw cli::usage_error("--format perfetto writes a binary file: name it with -o OUT "
                           "('-o -' for standard output, not a terminal)");
  const bool to_stdout = !out_path || *out_path == "-";
  if (perfetto && to_stdout && isatty(STDOUT_FILENO))
    throw cli::usage_error("--format perfetto: standard output is a terminal; "
                           "redirect it or name a file with -o OUT");

  auto r = trace_reader::open(pos[0]);
  if (!r) {
    std::fprintf(stderr, "magnet dump: %s\n", r.err().message.c_str());
    return 1;
  }
  auto n = r->validate();
  if (!n) {
    std::fprintf(stderr, "magnet dump: %s\n", n.err().message.c_str());
    return 1;
  }
  // Opened only now: a bad trace leaves no output file behind.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(nullptr, std::fclose);
  std::FILE* out = stdout;
  if (!to_stdout) {
    file.reset(std::fopen(out_path->c_str(), perfetto ? "wb" : "w"));
    if (!file) {
      std::fprintf(stderr, "magnet dump: %s\n",
                   error::from_errno("cannot create " + *out_path).message.c_str());
      return 1;
    }
    out = file.get();
  }
  // A partial output is removed, but only a regular file: OUT may be a
  // device or a FIFO (/dev/full, a named pipe), which is not ours to unlink.
  auto discard = [&] {
    struct stat st {};
    if (file && fstat(fileno(file.get()), &st) == 0 && S_ISREG(st.st_mode))
      std::remove(out_path->c_str());
  };
  auto finish = [&](bool ok) {
    ok = std::fflush(out) == 0 && ok;
    if (!ok && !to_stdout) {
      std::fprintf(stderr, "magnet dump: %s\n",
                   error::from_errno("cannot write " + *out_path).message.c_str());
      discard();
    }
    return ok ? 0 : 1;
  };
  if (perfetto) {
    auto st = export_perfetto(*r, out);
    if (!st) {
      const std::string where = to_stdout ? "standard output" : *out_path;
      std::fprintf(stderr, "magnet dump: %s\n",
                   st.err().code ? error::from_errno("cannot write " + where, st.err().code)
                                       .message.c_str()
                                 : st.err().message.c_str());
      discard();
      return 1;
    }
    return finish(true);
  }
  const auto& si = r->sysinfo();
  if (ulm) {
    for (;;) {
      auto rec = r->next();
      if (!rec) {
        std::fprintf(stderr, "magnet dump: %s\n", rec.err().message.c_str());
        return 1;
      }
      if (!*rec) break;
      auto line = ulm_line(*rec, si);
      if (line.empty()) continue;
      line += '\n';
      if (std::fwrite(line.data(), 1, line.size(), out) != line.size()) return finish(false);
    }
    return finish(true);
  }
  if (fmt == out_format::csv) std::fprintf(out, "%s\n", csv_header().c_str());
  if (fmt == out_format::text)
    std::fprintf(out, "# magnet trace format %u.%u, host %s, kernel %s, %u cpus, %s%s, "
                "realtime offset %lld ns\n",
                si.format_major, si.format_minor, si.hostname, si.kernel_release, si.ncpus,
                si.tool_version, r->foreign_endian() ? ", other-endian (converted)" : "",
                static_cast<long long>(si.realtime_offset_ns));
  for (;;) {
    auto rec = r->next();
    if (!rec) {  // validated above, so only an I/O change under us gets here
      std::fprintf(stderr, "magnet dump: %s\n", rec.err().message.c_str());
      return 1;
    }
    if (!*rec) break;
    uint16_t t = hdr_of(*rec).type;
    if (t == MAGNET_EV_EVENT_DESC) continue;
    if (t == MAGNET_EV_SYSINFO && fmt != out_format::json) continue;
    std::fputs(format_record(*rec, fmt).c_str(), out);
    std::fputc('\n', out);
  }
  return finish(!std::ferror(out));
}

}  // namespace magnet::host
