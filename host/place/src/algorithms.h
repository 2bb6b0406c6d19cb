// The planners, each on a state made from the fleet (private to
// host/place; make_plan in planner.cc validates the fleet and picks one).
#pragma once

#include "magnet/place/fleet.h"
#include "state.h"

namespace magnet::place::detail {

plan plan_magnet(state& s);       // magnet.cc
plan plan_pabfd(state& s);        // pabfd.cc
plan plan_watcher(state& s);      // watcher.cc
plan plan_first_fit(state& s);    // repack.cc
plan plan_round_robin(state& s);  // repack.cc

// The moves left under plan_options::max_moves, now that @s has moved
// what it has (max_moves 0: no limit).
int moves_left(const state& s);

}  // namespace magnet::place::detail
