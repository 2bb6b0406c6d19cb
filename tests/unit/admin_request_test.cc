// The query socket's request lines (admin_request.h), parsed without a daemon.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "magnet/admin/request.h"
#include "magnet/admin/vm_key.h"

namespace magnet::host {
namespace {

using kind = admin_request::kind;

TEST(AdminRequest, EveryRequestByItsFirstWord) {
  for (auto [line, k] : {std::pair{"top", kind::top}, {"vms", kind::vms},
                         {"sessions", kind::sessions}, {"kvm g1", kind::kvm},
                         {"stats g1", kind::stats}, {"views", kind::views},
                         {"views g1", kind::views}, {"mark g1 2", kind::mark},
                         {"frobnicate", kind::unknown}, {"", kind::unknown},
                         {"TOP", kind::unknown}}) {
    SCOPED_TRACE(line);
    EXPECT_EQ(parse_admin_request(line).k, k);
  }
}

TEST(AdminRequest, WordsAreSplitOnAnyWhiteSpaceAndExtraWordsIgnored) {
  auto r = parse_admin_request("  kvm\t g1 \r");
  EXPECT_EQ(r.k, kind::kvm);
  EXPECT_EQ(r.vm, "g1");
  r = parse_admin_request("views 3 and more");
  EXPECT_EQ(r.vm, "3");
  EXPECT_EQ(format_admin_request(r), "views 3");
  r = parse_admin_request("top g1");
  EXPECT_EQ(r.k, kind::top);
  EXPECT_EQ(r.vm, "") << "top takes no VM";
  r = parse_admin_request("stats");
  EXPECT_EQ(r.k, kind::stats);
  EXPECT_EQ(r.vm, "") << "the daemon answers: no running VM named ''";
}

TEST(AdminRequest, MarkValueIsAFiniteNumberAsAWhole) {
  auto r = parse_admin_request("mark g1 2.5");
  EXPECT_EQ(r.vm, "g1");
  ASSERT_TRUE(r.value);
  EXPECT_EQ(*r.value, 2.5);
  EXPECT_EQ(*parse_admin_request("mark g1 -1e3").value, -1000);
  const std::vector<std::string> bads = {"mark g1",       "mark g1 2x",    "mark g1 nan",
                                         "mark g1 inf",   "mark g1 1e999", "mark g1 ,5",
                                         std::string("mark g1 1\0x", 11)};
  for (const auto& bad : bads) {
    SCOPED_TRACE(bad);
    auto b = parse_admin_request(bad);
    EXPECT_EQ(b.k, kind::mark);
    EXPECT_FALSE(b.value) << b.value_text;
  }
  EXPECT_EQ(admin_bad_mark_value_error(parse_admin_request("mark g1 2x")),
            "error mark VM VALUE: '2x' is not a number");
}

TEST(AdminRequest, UnknownRequestErrorListsTheRequests) {
  EXPECT_EQ(admin_unknown_request_error(parse_admin_request("frob g1")),
            "error unknown request 'frob' (top, vms, sessions, kvm VM, stats VM, views [VM], "
            "mark VM VALUE)");
}

TEST(AdminRequest, CanonicalLineParsesBackToTheSameRequest) {
  for (const char* line : {"", "top", "vms x", "kvm  g1", "mark g1 7 8", "mark g1", "x y z"}) {
    SCOPED_TRACE(line);
    auto r = parse_admin_request(line);
    EXPECT_EQ(parse_admin_request(format_admin_request(r)), r);
  }
}

// The admin_request fuzzer's seeds: "ok-" ones are requests the daemon
// answers (a mark with its value), "bad-" ones are refused.
TEST(AdminRequest, FuzzSeedsParseAsNamed) {
  namespace fs = std::filesystem;
  int n = 0;
  for (const auto& ent : fs::directory_iterator(MAGNET_SOURCE_DIR "/fuzz/corpus/admin_request")) {
    const std::string name = ent.path().filename();
    SCOPED_TRACE(name);
    std::ifstream f(ent.path(), std::ios::binary);
    std::string line((std::istreambuf_iterator<char>(f)), {});
    auto r = parse_admin_request(line);
    const bool ok = r.k != kind::unknown && (r.k != kind::mark || r.value);
    EXPECT_EQ(ok, name.rfind("ok-", 0) == 0) << "'" << line << "'";
    ++n;
  }
  EXPECT_GE(n, 10);
}

// Which VM a request's key names (vm_key.h): one VM by any of its fields;
// a key that two VMs match by different fields is an error naming both;
// id:, uuid: and name: match their field alone.
TEST(AdminVmKey, ANameNeverShadowsAnIdOrAUuid) {
  const std::vector<vm_ref> vms = {{1, "3", "u-1"}, {2, "g2", "u-2"}, {3, "g3", "u-3"},
                                   {4, "u-2", "u-4"}, {5, "5", "u-5"}};
  auto at = [&](const std::string& k) { return find_vm_by_key(vms, k); };
  EXPECT_EQ(*at("g2"), 1u);
  EXPECT_EQ(*at("u-3"), 2u);
  EXPECT_EQ(*at("1"), 0u) << "no VM is named 1";
  EXPECT_EQ(*at("5"), 4u) << "VM 5 named 5: one VM";
  auto three = at("3");
  ASSERT_FALSE(three);
  EXPECT_EQ(three.err().message,
            "'3' names 2 VMs: VM 1 ('3', UUID u-1) by its name, VM 3 ('g3', UUID u-3) by its "
            "magnet id; a name never stands for another VM's id or UUID: ask for one of them as "
            "id:1, id:3 (or uuid:UUID, name:NAME)");
  auto u2 = at("u-2");
  ASSERT_FALSE(u2);
  EXPECT_NE(u2.err().message.find("VM 2 ('g2', UUID u-2) by its UUID, VM 4 ('u-2', UUID u-4) by its name"),
            std::string::npos)
      << u2.err().message;
  EXPECT_EQ(*at("id:3"), 2u);
  EXPECT_EQ(*at("name:3"), 0u);
  EXPECT_EQ(*at("uuid:u-2"), 1u);
  EXPECT_EQ(*at("name:u-2"), 3u);
  EXPECT_FALSE(at("uuid:3"));
  EXPECT_EQ(at("nosuch").err().message, "no running VM named 'nosuch' (by name, UUID or magnet id)");
  EXPECT_EQ(at("a\nb").err().message, "no running VM named 'a?b' (by name, UUID or magnet id)")
      << "a reply is one line";
  EXPECT_FALSE(find_vm_by_key({}, ""));
}

}  // namespace
}  // namespace magnet::host
