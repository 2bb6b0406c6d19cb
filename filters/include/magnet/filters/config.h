// Declarative view definitions in YAML (format: docs/engine.md, "Config").
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "magnet/filters/engine.h"
#include "magnet/result.h"

namespace magnet::filters {

// Parses a document with a top-level `views:` list.  Unknown keys are errors
// (a typo must not silently drop a filter); messages carry line:column.
// Only the format is checked here; engine::add_view validates the rest.
result<std::vector<view_spec>> parse_views(std::string_view yaml);
result<std::vector<view_spec>> load_views(const std::string& path);

// Adds all views or none (on error the engine is unchanged).
status add_views(engine& e, const std::vector<view_spec>& views);

}  // namespace magnet::filters
