#include "magnet/http/dashboard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <set>

namespace magnet::host {

using ojson = nlohmann::ordered_json;

namespace {

bool token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("._~+/=-").find(c) != std::string_view::npos;
}

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string url_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_digit(s[i + 1]) >= 0 && hex_digit(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
      i += 2;
    } else {  // '+' stays '+': tokens may have it, names and tokens no spaces
      out += s[i];
    }
  }
  return out;
}

namespace {

http_response unauthorized(const std::string& why) {
  http_response r{401, "text/plain; charset=utf-8",
                  "401 " + why +
                      ": give a token as 'Authorization: Bearer TOKEN', or open the page once as "
                      "/?token=TOKEN (docs/dashboard.md)\n"};
  r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"magnet\"");
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

}  // namespace

result<token_table> parse_tokens(std::string_view text, const std::string& name) {
  token_table t;
  std::set<std::string> seen;
  int line = 0;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find('\n', at);
    std::string_view l = text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    at = end == std::string_view::npos ? text.size() + 1 : end + 1;
    ++line;
    if (auto hash = l.find('#'); hash != std::string_view::npos) l = l.substr(0, hash);
    std::vector<std::string> words;
    size_t i = 0;
    while (i < l.size()) {
      while (i < l.size() && std::isspace(static_cast<unsigned char>(l[i]))) ++i;
      size_t j = i;
      while (j < l.size() && !std::isspace(static_cast<unsigned char>(l[j]))) ++j;
      if (j > i) words.emplace_back(l.substr(i, j - i));
      i = j;
    }
    if (words.empty()) continue;
    const std::string where = name + ":" + std::to_string(line) + ": ";
    if (words.size() == 1)
      return error{where + "a token without a scope: expected 'TOKEN all' or 'TOKEN DOMAIN-NAME-or-UUID'"};
    if (words.size() > 2)
      return error{where + "expected 'TOKEN all' or 'TOKEN DOMAIN-NAME-or-UUID', found " +
                   std::to_string(words.size()) + " words"};
    const std::string& tok = words[0];
    if (tok.size() < 16) return error{where + "the token is shorter than 16 characters"};
    if (!std::all_of(tok.begin(), tok.end(), token_char))
      return error{where + "the token has a character outside A-Z a-z 0-9 . _ ~ + / = -"};
    if (!seen.insert(tok).second) return error{where + "this token is given on an earlier line too"};
    access_token a;
    a.token = tok;
    a.line = line;
    if (words[1] == "all")
      a.all = true;
    else
      a.vm = words[1];
    t.tokens.push_back(std::move(a));
  }
  return t;
}

result<token_table> load_tokens(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return error::from_errno("cannot open " + path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return error::from_errno(path, e);
  }
  auto refuse = [&](const std::string& why) -> result<token_table> {
    ::close(fd);
    return error{path + ": " + why};
  };
  if (!S_ISREG(st.st_mode)) return refuse("not a regular file");
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    return refuse("owned by uid " + std::to_string(st.st_uid) + ", neither root nor this user");
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return refuse(std::string("mode ") + mode +
                  " lets others read or change it; secrets: chmod 600 (owner only)");
  }
  if (st.st_size > (1 << 20)) return refuse("larger than 1 MiB");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  auto t = parse_tokens(text, path);
  if (!t) return t.err();
  if (t->empty()) return error{path + ": no tokens"};
  return t;
}

bool constant_time_equal(std::string_view known, std::string_view given) {
  // Every byte of @given is looked at, against the known one at that
  // place (cycled), whatever matches; the length difference is folded in.
  unsigned char diff = known.size() == given.size() ? 0 : 1;
  if (known.empty()) return given.empty();
  for (size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(known[i % known.size()] ^ given[i]);
  return diff == 0;
}

bool access::may_see(const std::string& name, const std::string& uuid) const {
  if (all) return true;
  return !vm.empty() && (vm == name || (!uuid.empty() && iequal(vm, uuid)));
}

std::optional<std::string> request_token(const http_request& r, bool* from_query) {
  if (from_query) *from_query = false;
  // The query first: a token there must not be served whatever else the
  // request carries (authorize answers it with a redirect).
  if (size_t q = r.target.find('?'); q != std::string::npos) {
    std::string_view qs = std::string_view(r.target).substr(q + 1);
    while (!qs.empty()) {
      size_t amp = qs.find('&');
      std::string_view kv = qs.substr(0, amp);
      if (kv.starts_with("token=")) {
        if (from_query) *from_query = true;
        return url_decode(kv.substr(6));
      }
      if (amp == std::string_view::npos) break;
      qs = qs.substr(amp + 1);
    }
  }
  const std::string auth = r.header("Authorization");
  if (auth.size() > 7 && iequal(std::string_view(auth).substr(0, 7), "Bearer ")) {
    std::string t = auth.substr(7);
    while (!t.empty() && t.front() == ' ') t.erase(0, 1);
    while (!t.empty() && t.back() == ' ') t.pop_back();
    return t;
  }
  const std::string cookie = r.header("Cookie");
  std::string_view c = cookie;
  while (!c.empty()) {
    size_t semi = c.find(';');
    std::string_view kv = c.substr(0, semi);
    while (!kv.empty() && kv.front() == ' ') kv.remove_prefix(1);
    if (kv.starts_with("magnet_token=")) return std::string(kv.substr(13));
    if (semi == std::string_view::npos) break;
    c = c.substr(semi + 1);
  }
  return std::nullopt;
}

// Lax, not Strict: a link to /?token=T followed from another site is a
// cross-site navigation, and a Strict cookie set by its redirect would not
// come with the redirected request (the page would get 401).  Lax sends it
// on top-level GET navigations only; every route is a GET without effects,
// and a page elsewhere can not read what such a navigation shows.
std::string token_cookie(const std::string& token) {
  return "magnet_token=" + token + "; Path=/; HttpOnly; SameSite=Lax";
}

std::string without_token(std::string_view target) {
  const size_t q = target.find('?');
  std::string_view path = target.substr(0, q);
  while (!path.empty() && (path.front() == '/' || path.front() == '\\')) path.remove_prefix(1);
  std::string out = "/" + std::string(path);
  if (q == std::string_view::npos) return out;
  std::string kept;
  std::string_view qs = target.substr(q + 1);
  while (true) {
    const size_t amp = qs.find('&');
    const std::string_view kv = qs.substr(0, amp);
    if (!kv.empty() && !kv.starts_with("token=") && kv != "token") kept += (kept.empty() ? "" : "&") + std::string(kv);
    if (amp == std::string_view::npos) break;
    qs = qs.substr(amp + 1);
  }
  return kept.empty() ? out : out + "?" + kept;
}

http_response token_redirect(const http_request& r, const std::string& token) {
  const std::string to = without_token(r.target);
  return {303,
          "text/plain; charset=utf-8",
          "303 the token is a cookie now; continue at " + to + "\n",
          {{"Location", to}, {"Set-Cookie", token_cookie(token)}, {"Cache-Control", "no-store"}}};
}

auth_result authorize(const token_table& tokens, const http_request& r) {
  auth_result a;
  if (tokens.empty()) {
    a.who = access{true, {}};
    return a;
  }
  bool from_query = false;
  auto t = request_token(r, &from_query);
  if (!t || t->empty()) {
    a.refusal = unauthorized("this server needs a token");
    return a;
  }
  // Every token is compared, to the end: no timing tells which one matched.
  const access_token* match = nullptr;
  for (const auto& k : tokens.tokens)
    if (constant_time_equal(k.token, *t) && !match) match = &k;
  if (!match) {
    a.refusal = unauthorized("unknown token");
    return a;
  }
  if (from_query) {
    a.refusal = token_redirect(r, match->token);
    return a;
  }
  a.who = access{match->all, match->vm, match->line};
  return a;
}

ojson for_access(const ojson& dash, const access& who) {
  if (who.all) return dash;
  ojson out = ojson::object();
  for (const char* k : {"at_ms", "wall_ms"})
    if (dash.contains(k)) out[k] = dash[k];
  ojson vms = ojson::array();
  if (dash.contains("vms"))
    for (const auto& v : dash["vms"])
      if (who.may_see(v.value("name", ""), v.value("uuid", ""))) vms.push_back(v);
  out["vms"] = std::move(vms);
  return out;
}

http_response forbidden(const std::string& what) {
  return {403, "text/plain; charset=utf-8", "403 this token may not see " + what + "\n", {{"Cache-Control", "no-store"}}};
}

const embedded_asset* find_dashboard_asset(std::string_view path) {
  for (const auto& a : dashboard_assets())
    if (path == a.path) return &a;
  return nullptr;
}

}  // namespace magnet::host
