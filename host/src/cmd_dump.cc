#include <cinttypes>
#include <cstdio>

#include "commands.h"
#include "magnet/events.h"
#include "magnet/record.h"
#include "magnet/trace_file.h"

namespace magnet::host {

static const char* kDumpHelp =
    "Usage: magnet dump FILE [--format text|csv|json]\n"
    "\n"
    "Prints a trace file written by 'magnet record'.  The whole file is\n"
    "checked first: a corrupt or truncated file prints nothing but an error.\n"
    "  text  one line per record (default)\n"
    "  csv   header row: ts_ns,cpu,event,vm,tgid,tid,abstract_id,size,flags,\n"
    "        then every payload field (empty where a record has none)\n"
    "  json  JSON Lines: one object per record, the sysinfo record first\n"
    "Traces written on a machine of the other endianness are converted.\n";

int cmd_dump(cli::args& a) {
  if (a.flag("--help", "-h")) {
    std::fputs(kDumpHelp, stdout);
    return 0;
  }
  auto fmt_s = a.value("--format", "-F").value_or("text");
  auto pos = a.finish(1, 1, "trace FILE");
  out_format fmt;
  if (fmt_s == "text") fmt = out_format::text;
  else if (fmt_s == "csv") fmt = out_format::csv;
  else if (fmt_s == "json") fmt = out_format::json;
  else throw cli::usage_error("--format: '" + fmt_s + "' is not one of text, csv, json");

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
  const auto& si = r->sysinfo();
  if (fmt == out_format::csv) std::printf("%s\n", csv_header().c_str());
  if (fmt == out_format::text)
    std::printf("# magnet trace format %u.%u, host %s, kernel %s, %u cpus, %s%s, "
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
    std::fputs(format_record(*rec, fmt).c_str(), stdout);
    std::fputc('\n', stdout);
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace magnet::host
