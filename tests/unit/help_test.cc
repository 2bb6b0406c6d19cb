// The command lines of every program: --help exits 0 with the usage on
// standard output (a pipe to a pager or grep sees it), a wrong option still
// exits 2 with the usage on standard error; magnet's -v anywhere.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "proc.h"

namespace {

using magnet::test::run;

struct guest_tool {
  std::string name, path;
};

const std::vector<guest_tool> kGuestTools = {
    {"magnet-agent", MAGNET_AGENT_BIN},   {"magnet-watch", MAGNET_WATCH_BIN},
    {"magnet-poll", MAGNET_POLL_BIN},     {"magnet-adapt", MAGNET_ADAPT_BIN},
    {"magnet-adversary", MAGNET_ADVERSARY_BIN}, {"magnet-marker-echo", MAGNET_MARKER_ECHO_BIN},
};

bool starts_with_usage(const std::string& s) {
  return s.rfind("usage: ", 0) == 0 || s.rfind("Usage: ", 0) == 0;
}

TEST(GuestHelp, HelpExitsZeroWithTheUsageOnStandardOutput) {
  for (const auto& t : kGuestTools)
    for (const char* opt : {"--help", "-h"}) {
      auto r = run({t.path, opt}, 10);
      const std::string what = t.name + " " + opt + ": status " + std::to_string(r.status) +
                               ", stdout: " + r.out + ", stderr: " + r.err;
      EXPECT_EQ(r.status, 0) << what;
      EXPECT_TRUE(starts_with_usage(r.out)) << what;
      EXPECT_NE(r.out.find(t.name), std::string::npos) << what;
      EXPECT_TRUE(r.err.empty()) << what;
    }
}

TEST(GuestHelp, AWrongOptionIsStillAUsageError) {
  for (const auto& t : kGuestTools) {
    auto r = run({t.path, "--no-such-option"}, 10);
    const std::string what = t.name + ": status " + std::to_string(r.status) + ", stdout: " +
                             r.out + ", stderr: " + r.err;
    EXPECT_EQ(r.status, 2) << what;
    EXPECT_TRUE(r.out.empty()) << what;
    EXPECT_NE(r.err.find(t.name), std::string::npos) << what;
  }
}

// Every option each magnet command parses (host/cli/), as its help's option
// line starts: "-i, --interval" where it has a short form.
const std::vector<std::pair<std::string, std::vector<std::string>>> kCommandOptions = {
    {"probes", {"--json"}},
    {"record",
     {"-o, --output", "-p, --probes", "-f, --filter", "--vm", "--uri", "--sample", "--sample-time",
      "-d, --duration", "-b, --buffer", "--watermark", "--poll-timeout", "--usdt", "-q, --quiet", "--json",
      "--snap", "-i, --interface"}},
    {"dump", {"-F, --format", "-o, --output", "--json"}},
    {"stat", {"-p, --probes", "--vm", "--uri", "-i, --interval", "-c, --count", "-d, --duration", "--json"}},
    {"kvm", {"-i, --interval", "-c, --count", "-d, --duration", "--per-vcpu", "--vm", "--uri", "--json"}},
    {"host",
     {"--config", "--uri", "--views", "--socket", "--socket-group", "-p, --probes", "-b, --buffer",
      "--vm-quota", "--sample", "-d, --duration", "--no-seccomp", "--no-deliver", "--vsock", "--vsock-port",
      "--vsock-any-port", "--no-serial", "--link", "--http", "--http-tokens", "--http-host",
      "--http-stream-interval", "--metrics-detail", "--list-metrics", "--json", "--powercap-root",
      "--power-model", "--check-views", "--print-default-views"}},
    {"top", {"--socket", "-i, --interval", "-c, --count", "--timeout", "--json"}},
    {"views", {"--vm", "--view", "--socket", "-n, --rows", "--timeout", "--json"}},
    {"sessions", {"--socket", "--timeout", "--json"}},
    {"mark", {"--socket", "--timeout"}},
    {"stats", {"--socket", "--timeout", "--json"}},
    {"place",
     {"--prometheus", "--host", "--host-label", "--window", "--power-model", "--link-bps", "--algorithm",
      "--cpu-upper", "--peak-upper", "--mem-upper", "--link-upper", "--max-moves", "--query-timeout", "--json",
      "--apply", "--timeout"}},
    {"fleet-config", {"--target", "-o, --output", "--scrape-interval", "--job", "--token-file"}},
    {"reconstruct", {"-F, --format", "--runs", "--gap-ms", "--summary"}},
};

// Whether @help has a line that, after its indent, starts with @option
// followed by a space, '=' or the end of the line: the option described,
// not only named in the usage line.
bool has_option_line(const std::string& help, const std::string& option) {
  std::istringstream in(help);
  for (std::string line; std::getline(in, line);) {
    const size_t b = line.find_first_not_of(' ');
    if (b == 0 || b == std::string::npos || line.compare(b, option.size(), option) != 0) continue;
    const size_t e = b + option.size();
    if (e == line.size() || line[e] == ' ' || line[e] == '=') return true;
  }
  return false;
}

TEST(CliHelp, EveryCommandsHelpDescribesEveryOptionOnStandardOutput) {
  for (const auto& [cmd, options] : kCommandOptions)
    for (const char* opt : {"--help", "-h"}) {
      auto r = run({MAGNET_BIN, cmd, opt}, 10);
      const std::string what = "magnet " + cmd + " " + opt;
      EXPECT_EQ(r.status, 0) << what << ": " << r.err;
      EXPECT_TRUE(r.err.empty()) << what << ": " << r.err;
      EXPECT_EQ(r.out.rfind("Usage: magnet " + cmd, 0), 0u) << what << ": " << r.out;
      for (const auto& o : options)
        EXPECT_TRUE(has_option_line(r.out, o)) << what << " has no line describing " << o;
    }
}

// The table above against the sources: an option a command parses that no
// command's help describes fails here, so help and parser cannot drift.
TEST(CliHelp, EveryOptionTheSourcesParseIsInTheTable) {
  std::set<std::string> described;
  for (const auto& [cmd, options] : kCommandOptions)
    for (const auto& o : options) {
      const size_t comma = o.find(", ");
      described.insert(comma == std::string::npos ? o : o.substr(comma + 2));
      if (comma != std::string::npos) described.insert(o.substr(0, comma));
    }
  const std::regex parsed(R"re(\.(flag|value|values|optional_value)\("(-[-a-z0-9]+)"(, "(-[a-zA-Z])")?)re");
  size_t seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(MAGNET_SOURCE_DIR "/host/cli")) {
    if (e.path().extension() != ".cc") continue;
    std::ifstream f(e.path());
    const std::string src((std::istreambuf_iterator<char>(f)), {});
    for (std::sregex_iterator m(src.begin(), src.end(), parsed), end; m != end; ++m)
      for (int g : {2, 4}) {
        const std::string o = (*m)[g];
        if (o.empty() || o == "--help" || o == "-h") continue;
        ++seen;
        EXPECT_TRUE(described.count(o)) << e.path().filename() << " parses " << o
                                        << ", which no command's help describes";
      }
  }
  EXPECT_GT(seen, 40u) << "the pattern no longer finds the options in host/cli/";
}

TEST(CliHelp, TheTopLevelHelpNamesEveryCommandAndEveryDumpFormat) {
  auto r = run({MAGNET_BIN, "--help"}, 10);
  ASSERT_EQ(r.status, 0) << r.err;
  for (const auto& [cmd, options] : kCommandOptions)
    EXPECT_TRUE(has_option_line(r.out, cmd)) << "magnet --help lists no command " << cmd;
  const size_t dump = r.out.find("  dump ");
  ASSERT_NE(dump, std::string::npos);
  const std::string dump_text = r.out.substr(dump, r.out.find("\n  stat ") - dump);
  for (const char* fmt : {"text", "CSV", "JSON", "ULM", "Perfetto"})
    EXPECT_NE(dump_text.find(fmt), std::string::npos) << "dump's line omits " << fmt << ": " << dump_text;
  for (const char* opt : {"-v, --verbose", "--version", "-h, --help"})
    EXPECT_TRUE(has_option_line(r.out, opt)) << "magnet --help has no line describing " << opt;
}

TEST(CliVerbose, AnywhereOnTheCommandLineAndAsManyAsWanted) {
  const std::string missing = "/nonexistent/magnet-verbose-" + std::to_string(getpid()) + ".mtr";
  const std::vector<std::vector<std::string>> lines = {
      {MAGNET_BIN, "dump", missing, "-v"},   {MAGNET_BIN, "-vvv", "dump", missing},
      {MAGNET_BIN, "dump", "-vv", missing},  {MAGNET_BIN, "-v", "dump", missing, "-v", "-v", "-v"},
      {MAGNET_BIN, "--verbose", "dump", missing, "--verbose"},
  };
  for (const auto& argv : lines) {
    auto r = run(argv, 10);
    std::string what;
    for (size_t i = 1; i < argv.size(); ++i) what += argv[i] + " ";
    what += ": status " + std::to_string(r.status) + ", stderr: " + r.err;
    // Exit 1 naming the missing file: the -v's were taken, the command ran.
    EXPECT_EQ(r.status, 1) << what;
    EXPECT_NE(r.err.find(missing), std::string::npos) << what;
    EXPECT_EQ(r.err.find("unknown option"), std::string::npos) << what;
  }
  auto r = run({MAGNET_BIN, "host", "-v", "--help"}, 10);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Usage: magnet host", 0), 0u) << r.out;
}

// One duration syntax (magnet/cli.h) in every program: a bad value is a
// usage error naming the option and the value; where an option took
// milliseconds, a bare number is refused rather than read as seconds.
TEST(Durations, EveryProgramRefusesABadValueNamingTheOptionAndTheValue) {
  const std::string sock = "/nonexistent/magnet-help-" + std::to_string(getpid()) + ".sock";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{MAGNET_BIN, "record", "-o", "/tmp/x.mtr", "--duration", "5parsecs"}, "--duration: '5parsecs'"},
      {{MAGNET_BIN, "top", "--socket", sock, "--interval", "0"}, "--interval: '0'"},
      {{MAGNET_BIN, "views", "--socket", sock, "--timeout", "1h"}, "--timeout: '1h'"},
      {{MAGNET_AGENT_BIN, "--period", "100"}, "--period: '100' needs a unit"},
      {{MAGNET_AGENT_BIN, "--period", "5ms"}, "--period: '5ms'"},
      {{MAGNET_AGENT_BIN, "-d", "soon"}, "--duration: 'soon'"},
      {{MAGNET_AGENT_BIN, "view", "--socket", sock, "--wait", "x"}, "--wait: 'x'"},
      {{MAGNET_WATCH_BIN, "--socket", sock, "--period", "1000"}, "--period: '1000' needs a unit"},
      {{MAGNET_ADAPT_BIN, "receive", "--port", "9", "--interval", "100"}, "--interval: '100' needs a unit"},
      {{MAGNET_ADAPT_BIN, "send", "--to", "127.0.0.1:9", "--tcp", "--duration", "-1"}, "--duration: '-1'"},
      {{MAGNET_MARKER_ECHO_BIN, "--to", "127.0.0.1:9", "--duration", "3x"}, "--duration: '3x'"},
  };
  for (const auto& [argv, want] : cases) {
    auto r = run(argv, 10);
    std::string what;
    for (const auto& a : argv) what += a + " ";
    what += ": status " + std::to_string(r.status) + ", stderr: " + r.err;
    EXPECT_EQ(r.status, 2) << what;
    EXPECT_NE(r.err.find(want), std::string::npos) << what;
  }
}

// The positive side, and the agent's log lines as an operator's terminal
// shows them: RFC 3339 time in milliseconds, then the severity.
TEST(Durations, TheAgentTakesThemAndLogsWithTimeAndSeverity) {
  const std::string sock = "/tmp/magnet-help-agent-" + std::to_string(getpid()) + ".sock";
  auto r = run({MAGNET_AGENT_BIN, "--host", "none", "--no-probes", "--socket", sock, "--period",
                "250ms", "-d", "1s"},
               20);
  EXPECT_EQ(r.status, 0) << r.err;
  const std::regex started(R"((^|\n)\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z )"
                           R"(notice magnet-agent: \[agent\.started\] socket )" + sock + "\n");
  EXPECT_TRUE(std::regex_search(r.err, started)) << r.err;
  EXPECT_NE(r.err.find(" notice magnet-agent: [agent.stopped]\n"), std::string::npos) << r.err;
}

// Under systemd (JOURNAL_STREAM names stderr's device:inode) the same lines
// carry the syslog priority and no time: journald records both.
TEST(AgentLog, ThePriorityAloneWhenStderrIsTheJournal) {
  const std::string base = "/tmp/magnet-help-journal-" + std::to_string(getpid());
  auto r = run({"sh", "-c",
                "exec 2>" + base + ".err; JOURNAL_STREAM=$(stat -c %d:%i " + base + ".err) exec " +
                    MAGNET_AGENT_BIN + " --host none --no-probes --socket " + base + ".sock -d 300ms"},
               20);
  std::ifstream f(base + ".err");
  const std::string err((std::istreambuf_iterator<char>(f)), {});
  std::filesystem::remove(base + ".err");
  EXPECT_EQ(r.status, 0) << err;
  EXPECT_NE(err.find("<5>magnet-agent: [agent.started] socket " + base + ".sock\n"), std::string::npos) << err;
  EXPECT_NE(err.find("<5>magnet-agent: [agent.stopped]\n"), std::string::npos) << err;
  EXPECT_EQ(err.find("Z notice"), std::string::npos) << "no time stamp in the journal: " << err;
}

TEST(Durations, AdaptReceiveReportsEveryIntervalGivenWithItsUnit) {
  const std::string port = std::to_string(20000 + getpid() % 20000);
  auto r = run({MAGNET_ADAPT_BIN, "receive", "--bind", "127.0.0.1", "--port", port, "--interval",
                "100ms", "--duration", "0.55s"},
               10);
  ASSERT_EQ(r.status, 0) << r.err;
  // 100 ms intervals in 0.55 s: about 5 lines, the first at 0.1 s (fewer
  // on a starved machine; none at all if 100ms were read otherwise).
  std::vector<nlohmann::json> lines;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) lines.push_back(nlohmann::json::parse(l, nullptr, false));
  ASSERT_GE(lines.size(), 2u) << r.out;
  EXPECT_LE(lines.size(), 6u) << r.out;
  ASSERT_TRUE(lines[0].is_object()) << r.out;
  EXPECT_GE(lines[0].value("t", 0.0), 0.1) << r.out;
  EXPECT_LT(lines[0].value("t", 1.0), 0.3) << r.out;
}

TEST(Json, PollPrintsOneObjectPerLine) {
  auto r = run({MAGNET_POLL_BIN, "--socket", "/nonexistent/agent.sock", "--count", "2", "--json"}, 20);
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream in(r.out);
  int lines = 0;
  for (std::string l; std::getline(in, l); ++lines) {
    auto j = nlohmann::json::parse(l, nullptr, false);
    ASSERT_TRUE(j.is_object()) << l;
    EXPECT_EQ(j["connected"], false) << l;
    for (const char* stat : {"tap.tx_bps", "vcpu.wait_sum", "link.available_bps"}) {
      ASSERT_TRUE(j.contains(stat)) << l;
      EXPECT_TRUE(j[stat]["value"].is_null()) << l;  // no agent: nothing valid
    }
  }
  EXPECT_EQ(lines, 2) << r.out;
}

// Man pages and bash completion (tools/cli-docs/gen.py): generated from the
// --help texts at build time; checked here against this file's own table.
const std::string kDocs = MAGNET_CLI_DOCS_DIR;

TEST(CliDocs, TheManPagesRenderWithoutWarningsAndDescribeEveryCommandAndOption) {
  for (const char* page : {"magnet.1", "magnet-agent.1"}) {
    auto g = run({"groff", "-man", "-ww", "-z", kDocs + "/" + page}, 20);
    EXPECT_EQ(g.status, 0) << page << ": " << g.err;
    EXPECT_TRUE(g.err.empty()) << page << ": " << g.err;
  }
  // LC_ALL=C: ASCII hyphens (a UTF-8 page renders \- as a minus sign).
  auto m = run({"sh", "-c", "LC_ALL=C MANWIDTH=100 man -l -P cat " + kDocs + "/magnet.1"}, 20);
  ASSERT_EQ(m.status, 0) << m.err;
  EXPECT_TRUE(m.err.empty()) << m.err;
  for (const auto& [cmd, options] : kCommandOptions) {
    const size_t at = m.out.find("\n   magnet " + cmd + "\n");
    ASSERT_NE(at, std::string::npos) << "no section for magnet " << cmd << ":\n" << m.out;
    const size_t end = m.out.find("\n   magnet ", at + 1);
    const std::string section = m.out.substr(at, end == std::string::npos ? std::string::npos : end - at);
    for (const auto& o : options)
      EXPECT_NE(section.find(o), std::string::npos) << "magnet " << cmd << "'s section lacks " << o;
  }
  for (const char* opt : {"-v, --verbose", "--version"})
    EXPECT_NE(m.out.find(opt), std::string::npos) << opt;
}

// Completions that bash computes for the words of @line (the last one being
// completed), with the generated script sourced.
std::vector<std::string> complete(const std::vector<std::string>& line) {
  std::string words;
  for (const auto& w : line) words += " '" + w + "'";
  const std::string fn = line[0] == "magnet-agent" ? "_magnet_agent" : "_magnet";
  auto r = run({"bash", "--norc", "-c",
                "source '" + kDocs + "/magnet.bash-completion' && COMP_WORDS=(" + words +
                    ") && COMP_CWORD=$((${#COMP_WORDS[@]} - 1)) && " + fn +
                    " && printf '%s\\n' \"${COMPREPLY[@]}\""},
               20);
  EXPECT_EQ(r.status, 0) << r.err;
  std::vector<std::string> out;
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(CliDocs, BashCompletesEveryCommandItsOptionsAndSomeValues) {
  auto reg = run({"bash", "--norc", "-c",
                  "source '" + kDocs + "/magnet.bash-completion' && complete -p magnet magnet-agent"});
  EXPECT_NE(reg.out.find("complete -F _magnet magnet\n"), std::string::npos) << reg.out << reg.err;
  EXPECT_NE(reg.out.find("complete -F _magnet_agent magnet-agent\n"), std::string::npos) << reg.out;
  auto cmds = complete({"magnet", ""});
  for (const auto& [cmd, options] : kCommandOptions) EXPECT_TRUE(has(cmds, cmd)) << cmd;
  EXPECT_TRUE(has(complete({"magnet", "-v", "re"}), "record"));
  EXPECT_EQ(complete({"magnet", "st"}), (std::vector<std::string>{"stat", "stats"}));
  for (const auto& [cmd, options] : kCommandOptions) {
    auto got = complete({"magnet", cmd, "-"});
    for (const auto& o : options) {
      const size_t comma = o.find(", ");
      EXPECT_TRUE(has(got, comma == std::string::npos ? o : o.substr(comma + 2))) << cmd << " " << o;
    }
  }
  EXPECT_EQ(complete({"magnet", "dump", "f.mtr", "--format", "p"}), (std::vector<std::string>{"perfetto"}));
  EXPECT_TRUE(complete({"magnet", "stat", "--interval", ""}).empty()) << "a duration: nothing to offer";
  const std::string dir = "/tmp/magnet-complete-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/trace.mtr").put('x');
  EXPECT_EQ(complete({"magnet", "record", "-o", dir + "/tr"}), (std::vector<std::string>{dir + "/trace.mtr"}));
  EXPECT_EQ(complete({"magnet", "dump", dir + "/tr"}), (std::vector<std::string>{dir + "/trace.mtr"}));
  std::filesystem::remove_all(dir);
  auto agent = complete({"magnet-agent", ""});
  for (const char* w : {"run", "view", "--period", "--socket", "--json", "--wait", "--duration"})
    EXPECT_TRUE(has(agent, w)) << w;
}

}  // namespace
