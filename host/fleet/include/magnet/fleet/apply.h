// Performing a plan (`magnet place --apply`): its moves in order, each a
// live migration; on a failed step the moves this run made are migrated
// back, in reverse order.  The logic is here, the migrations behind an
// interface (libvirt.h has libvirt's; the tests a fake), so that the
// rollback and its checks are tested without hosts.
//
// A VM is never left undefined on both sides: a move starts only when the
// VM is persistent on its source (a migration with PERSIST_DEST and
// UNDEFINE_SOURCE moves its definition with it), its persistent definition
// is saved first, and after any failed migration the VM's definition is
// looked for on both hosts; where it is on neither, it is defined again
// from the saved copy, on the host it runs on (else its source).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "magnet/place/fleet.h"
#include "magnet/result.h"

namespace magnet::fleet {

// A migration's progress, as libvirt's job statistics give it.
struct migration_progress {
  double elapsed_s = 0;
  uint64_t processed_bytes = 0, total_bytes = 0, remaining_bytes = 0;  // 0: not known yet
};
using progress_fn = std::function<void(const migration_progress&)>;

// Hosts by their fleet names (the plan's from and to).
class migrator {
 public:
  virtual ~migrator() = default;
  // Whether @vm is defined persistently on @host; an error when the host
  // cannot be asked.
  virtual result<bool> persistent_on(const std::string& vm, const std::string& host) = 0;
  // Whether @vm is active (running or paused) on @host.
  virtual result<bool> active_on(const std::string& vm, const std::string& host) = 0;
  // Its persistent definition on @host (XML), saved before a move.
  virtual result<std::string> definition(const std::string& vm, const std::string& host) = 0;
  // A live migration of @vm from @from to @to, within @timeout (past it the
  // migration is aborted and this is an error); @progress is called as it
  // goes.
  virtual status migrate(const std::string& vm, const std::string& from, const std::string& to,
                         std::chrono::milliseconds timeout, const progress_fn& progress) = 0;
  // Defines @vm on @host from @xml.
  virtual status define(const std::string& vm, const std::string& host, const std::string& xml) = 0;
};

// One migration this run performed or tried.
struct step {
  std::string vm, from, to;
  bool rollback = false;  // migrating back a move of this run
  bool ok = false;
  double seconds = 0;
  std::string error;      // why it failed
  std::string where;      // after a failure: where the VM is defined now ("defined on a (its source)")
};

struct apply_report {
  std::vector<step> steps;  // in the order performed, rollbacks after the failed step
  bool ok = true;           // every move done
  std::string failure;      // the step that failed and why
  // A VM whose definition could be found on neither host, even after
  // defining it again (or a host that could not be asked): the operator
  // must look.
  std::vector<std::string> unsafe;
};

// Called with a line for people at each stage (starting a move, its
// progress, its end, the rollback).
using report_fn = std::function<void(const std::string&)>;

// Performs @moves in order through @m, each bounded by @timeout; on the
// first failure, stops and migrates back what it moved, newest first.
apply_report apply_moves(const std::vector<place::move>& moves, migrator& m,
                         std::chrono::milliseconds timeout, const report_fn& say);

}  // namespace magnet::fleet
