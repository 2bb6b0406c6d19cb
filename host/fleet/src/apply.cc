#include "magnet/fleet/apply.h"

#include <cstdio>

namespace magnet::fleet {

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string mib(uint64_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(b) / (1 << 20));
  return s;
}

std::string progress_line(const std::string& vm, const migration_progress& p) {
  char head[64];
  std::snprintf(head, sizeof head, "%.1f s", p.elapsed_s);
  std::string line = "  " + vm + ": " + head;
  if (p.total_bytes) {
    char pct[32];
    std::snprintf(pct, sizeof pct, " %.0f%%", 100.0 * static_cast<double>(p.processed_bytes) /
                                                  static_cast<double>(p.total_bytes));
    line += pct;
  }
  if (p.processed_bytes) line += ", " + mib(p.processed_bytes) + " sent";
  if (p.total_bytes) line += " of " + mib(p.total_bytes) + ", " + mib(p.remaining_bytes) + " left";
  return line;
}

// Where @vm's definition is after a failed migration between @from and
// @to; defines it again from @saved where it is on neither host.  Returns
// the sentence for people; @unsafe gets it too when the VM may be
// defined nowhere.
std::string settle(migrator& m, const std::string& vm, const std::string& from, const std::string& to,
                   const std::string& saved, std::vector<std::string>& unsafe) {
  auto on_from = m.persistent_on(vm, from);
  auto on_to = m.persistent_on(vm, to);
  if ((on_from && *on_from) || (on_to && *on_to)) {
    std::string where = "defined on ";
    if (on_from && *on_from) where += from;
    if (on_from && *on_from && on_to && *on_to) where += " and ";
    if (on_to && *on_to) where += to;
    return where;
  }
  if (!on_from || !on_to) {
    const std::string why = !on_from ? on_from.err().message : on_to.err().message;
    const std::string what = !on_from && !on_to
                                 ? "neither " + from + " nor " + to + " can be asked: " + why
                                 : "not defined on " + (on_from ? from : to) + ", and " + (on_from ? to : from) +
                                       " cannot be asked: " + why;
    unsafe.push_back(vm + ": " + what);
    return "not known to be defined anywhere (" + what + ")";
  }
  // Defined nowhere: again, where it runs (else where it came from).
  auto runs_on_to = m.active_on(vm, to);
  const std::string host = runs_on_to && *runs_on_to ? to : from;
  if (auto st = m.define(vm, host, saved); !st) {
    unsafe.push_back(vm + ": defined on neither " + from + " nor " + to + ", and defining it again on " + host +
                     " failed: " + st.err().message);
    return "defined nowhere";
  }
  return "defined on " + host + " again, from its definition saved before the move";
}

// One migration, timed and reported; on failure @s.where says where the
// VM is defined now.
step migrate_one(migrator& m, const place::move& mv, bool back, const std::string& saved,
                 std::chrono::milliseconds timeout, const report_fn& say, std::vector<std::string>& unsafe) {
  step s{mv.vm, back ? mv.to : mv.from, back ? mv.from : mv.to, back};
  say(std::string(back ? "rolling back " : "moving ") + s.vm + ": " + s.from + " -> " + s.to);
  const auto t0 = std::chrono::steady_clock::now();
  auto st = m.migrate(s.vm, s.from, s.to, timeout, [&](const migration_progress& p) { say(progress_line(s.vm, p)); });
  s.seconds = since(t0);
  s.ok = st.ok();
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f s", s.seconds);
  if (s.ok) {
    say(std::string(back ? "rolled back " : "moved ") + s.vm + ": " + s.from + " -> " + s.to + " in " + secs);
    return s;
  }
  s.error = st.err().message;
  s.where = settle(m, s.vm, s.from, s.to, saved, unsafe);
  say(std::string(back ? "rolling back " : "moving ") + s.vm + " failed after " + secs + ": " + s.error + "; " +
      s.vm + " is " + s.where);
  return s;
}

// Checks that @mv's VM may move and saves its definition; an error says why not.
result<std::string> prepare(migrator& m, const place::move& mv) {
  auto p = m.persistent_on(mv.vm, mv.from);
  if (!p) return error{"cannot check that " + mv.vm + " is persistent on " + mv.from + ": " + p.err().message};
  if (!*p)
    return error{mv.vm + " is not persistently defined on " + mv.from +
                 ": not moved (a failed migration could leave it defined nowhere)"};
  auto xml = m.definition(mv.vm, mv.from);
  if (!xml) return error{"cannot save " + mv.vm + "'s definition on " + mv.from + ": " + xml.err().message};
  return xml;
}

}  // namespace

apply_report apply_moves(const std::vector<place::move>& moves, migrator& m, std::chrono::milliseconds timeout,
                         const report_fn& say) {
  apply_report r;
  std::vector<std::pair<const place::move*, std::string>> done;  // with its saved definition
  for (size_t i = 0; i < moves.size() && r.ok; ++i) {
    const auto& mv = moves[i];
    const std::string step_name = "step " + std::to_string(i + 1) + " of " + std::to_string(moves.size());
    auto saved = prepare(m, mv);
    if (!saved) {
      r.ok = false;
      r.failure = step_name + ": " + saved.err().message;
      say(r.failure);
      break;
    }
    r.steps.push_back(migrate_one(m, mv, false, *saved, timeout, say, r.unsafe));
    if (r.steps.back().ok) {
      done.emplace_back(&mv, *saved);
    } else {
      r.ok = false;
      r.failure = step_name + ": moving " + mv.vm + " " + mv.from + " -> " + mv.to + " failed: " +
                  r.steps.back().error + "; " + mv.vm + " is " + r.steps.back().where;
    }
  }
  if (r.ok) return r;
  if (!done.empty()) say("rolling back the " + std::to_string(done.size()) + " move(s) of this run, newest first");
  for (auto it = done.rbegin(); it != done.rend(); ++it)
    r.steps.push_back(migrate_one(m, *it->first, true, it->second, timeout, say, r.unsafe));
  return r;
}

}  // namespace magnet::fleet
