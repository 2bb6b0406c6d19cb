// The live web dashboard of `magnet host --http` (docs/dashboard.md): who
// may see what (tokens, tenants), and the JSON the page and its event
// stream get, cut down to what the asker may see.  The daemon (daemon.cc)
// owns the routes; everything here is plain data in, plain data out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "magnet/http/server.h"
#include "magnet/result.h"

namespace magnet::host {

// One line of a token file: "TOKEN all" (an operator: every VM, /metrics)
// or "TOKEN VM" (a tenant: the one VM libvirt knows by that domain name or
// UUID, nothing else).
struct access_token {
  std::string token;
  bool all = false;
  std::string vm;  // the domain name or UUID, as written (tenants)
  int line = 0;
};
struct token_table {
  std::vector<access_token> tokens;
  bool empty() const { return tokens.empty(); }
};

// The file's text: one token a line, '#' comments and blank lines skipped.
// Refused with the line's number and why: a line without a scope, a token
// shorter than 16 characters or with characters outside [A-Za-z0-9._~+/=-],
// a token given twice, extra words.  @name names the file in messages.
result<token_table> parse_tokens(std::string_view text, const std::string& name);
// Reads @path: refused unless a regular file owned by root or by us, and
// neither group- nor world-readable or -writable (mode 0600 or 0400).
result<token_table> load_tokens(const std::string& path);

// Equal without a timing that depends on where they differ (or on the
// length of the secret @known beyond whether the lengths match).
bool constant_time_equal(std::string_view known, std::string_view given);

// Who is asking: everything (no tokens configured, or an operator token),
// or a tenant limited to one VM (its name or UUID as the token file says).
struct access {
  bool all = false;
  std::string vm;
  int token_line = 0;  // the token's line in the file (0: no tokens); its streams' share
  // A VM the asker may see, matched by the registry's name and UUID (never
  // by anything the request says).
  bool may_see(const std::string& name, const std::string& uuid) const;
};

// The request's token: "?token=T" in the query, else "Authorization:
// Bearer T", else the cookie magnet_token=T.  @from_query is set when it
// came from the query (then it is never served: authorize redirects).
std::optional<std::string> request_token(const http_request& r, bool* from_query = nullptr);

struct auth_result {
  std::optional<access> who;  // empty: no data for this request
  // When @who is empty, the whole answer: 401 with why, or the 303 that
  // turns a token in the query into a cookie (token_redirect).
  http_response refusal;
};
// With no tokens, everything; else the token's access, or 401; a known
// token in the query gets its redirect and no access, so that a reply with
// data never answers an address with a token in it.
auth_result authorize(const token_table& tokens, const http_request& r);

// The Set-Cookie value that keeps @token for later requests of the page.
std::string token_cookie(const std::string& token);
// @target without its token= parameters (the others kept, in order), and
// with a single leading '/' (a Location of "//elsewhere" would send the
// browser to another host).
std::string without_token(std::string_view target);
// 303 to without_token(r.target), setting token_cookie(@token): the token
// leaves the address bar and the history for a cookie.
http_response token_redirect(const http_request& r, const std::string& token);

// The dashboard's JSON ({"vms": [...], ...} as the daemon builds it from
// what `magnet top` shows) for @who: a tenant gets its VM's row alone and
// none of the host-wide fields (only "vms", "at_ms" and "wall_ms" stay).
nlohmann::ordered_json for_access(const nlohmann::ordered_json& dash, const access& who);

// %XX decoded (a query value, a path segment); nothing else changed.
std::string url_decode(std::string_view s);

// A 403 for a tenant asking for what is not its own.
http_response forbidden(const std::string& what);

// Built-in front-end files (generated at build time: dashboard_assets.cc).
struct embedded_asset {
  const char* path;  // e.g. "/assets/uPlot.iife.min.js"
  const char* content_type;
  const unsigned char* data;
  size_t size;
};
const std::vector<embedded_asset>& dashboard_assets();
const embedded_asset* find_dashboard_asset(std::string_view path);

}  // namespace magnet::host
