// libmagnet-client for C++: the same library as magnet/client.h, as a class.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "magnet/client.h"

namespace magnet {

class client {
 public:
  using value = magnet_value;
  enum class mode { periodic = MAGNET_CLIENT_PERIODIC, on_change = MAGNET_CLIENT_ON_CHANGE };

  explicit client(const std::string& socket_path = {})
      : c_(magnet_client_new(socket_path.empty() ? nullptr : socket_path.c_str())) {}
  ~client() { magnet_client_free(c_); }
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  // False with error() naming the problem.
  bool subscribe(const std::vector<std::string>& names, unsigned period_ms,
                 mode m = mode::periodic) {
    std::vector<const char*> p;
    for (const auto& n : names) p.push_back(n.c_str());
    return magnet_client_subscribe(c_, p.data(), p.size(), period_ms, static_cast<int>(m)) == 0;
  }
  void on_value(std::function<void(const value&)> fn) {
    fn_ = std::move(fn);
    magnet_client_on_value(c_, fn_ ? &client::trampoline : nullptr, this);
  }
  int poll(int timeout_ms) { return magnet_client_poll(c_, timeout_ms); }
  std::optional<value> get(const std::string& name, uint32_t index = 0) const {
    value v;
    if (magnet_client_get(c_, name.c_str(), index, &v) != 0) return std::nullopt;
    return v;
  }
  bool connected() const { return magnet_client_connected(c_); }
  uint64_t session() const { return magnet_client_session(c_); }
  int fd() const { return magnet_client_fd(c_); }
  std::string error() const { return magnet_client_error(c_); }

 private:
  static void trampoline(const magnet_value* v, void* self) {
    static_cast<client*>(self)->fn_(*v);
  }
  magnet_client* c_;
  std::function<void(const value&)> fn_;
};

}  // namespace magnet
