#pragma once
namespace magnet { inline constexpr const char* kVersion = "0.1.0"; }
