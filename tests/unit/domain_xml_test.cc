// The VM registry's domain-XML reader (domain_xml.h): every fact from real
// descriptions (the lab's, as libvirt gives them back), impostors that are
// not at the fact's exact place, and hostile or malformed documents, each
// an error that names the problem and never an exception.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "magnet/registry/domain_xml.h"

namespace magnet::host {
namespace {

const std::filesystem::path kCorpus = std::filesystem::path(MAGNET_SOURCE_DIR) / "fuzz/corpus/domain_xml";

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

domain_xml_facts facts(const std::string& xml) {
  auto f = parse_domain_xml(xml);
  EXPECT_TRUE(f) << f.err().message << "\n" << xml;
  return f ? *f : domain_xml_facts{};
}

// The error's message, or "" when @xml was accepted.
std::string parse_error_of(const std::string& xml) {
  result<domain_xml_facts> f = domain_xml_facts{};
  EXPECT_NO_THROW(f = parse_domain_xml(xml)) << xml;
  return f ? "" : f.err().message;
}

std::string with_devices(const std::string& devices) { return "<domain><devices>" + devices + "</devices></domain>"; }
std::string with_cid(const std::string& address) {
  return with_devices("<vsock model='virtio'><cid auto='no' address='" + address + "'/></vsock>");
}

TEST(DomainXml, EveryFactOfALabGuestAsLibvirtGivesItBack) {
  // g1 of a direct lab (virDomainGetXMLDesc of a running domain), and the
  // same with the nested lab's vsock device and a <bandwidth>.
  auto direct = facts(slurp(kCorpus / "lab-direct-g1-live.xml"));
  EXPECT_EQ(direct.taps, std::vector<std::string>{"vnet0"});
  EXPECT_EQ(direct.vsock_cid, 0u);
  EXPECT_EQ(direct.view_channel, "/run/magnet-lab-e2e-direct/guests/g1/view.sock");
  EXPECT_EQ(direct.allowance_tx_bps, 0);
  EXPECT_EQ(direct.allowance_rx_bps, 0);
  auto nested = facts(slurp(kCorpus / "lab-nested-g2-vsock-bandwidth.xml"));
  EXPECT_EQ(nested.taps, std::vector<std::string>{"vnet1"});
  EXPECT_EQ(nested.vsock_cid, 4u);
  EXPECT_EQ(nested.view_channel, "/run/magnet-lab-nested/guests/g1/view.sock");
  EXPECT_DOUBLE_EQ(nested.allowance_tx_bps, 6250 * 8000.0) << "outbound 6250 kB/s";
  EXPECT_DOUBLE_EQ(nested.allowance_rx_bps, 12500 * 8000.0) << "inbound 12500 kB/s";
  auto tmpl = facts(slurp(kCorpus / "template-guest.xml"));
  EXPECT_EQ(tmpl.vsock_cid, 3u);
  EXPECT_TRUE(tmpl.taps.empty()) << "an inactive bridge interface has no target yet";
}

TEST(DomainXml, TapsAndVsockCid) {
  auto f = facts(R"(<domain type='kvm'><name>g1</name><devices>
    <interface type='bridge'><mac address='52:54:00:00:00:01'/><source bridge='br0'/>
      <target dev='vnet3'/><model type='virtio'/></interface>
    <interface type="ethernet"><target dev="tapg1b" managed="no"/></interface>
    <interface type='ethernet'><target managed='no' dev='tapg1c'/><target dev='second'/></interface>
    <interface type='vhostuser'><source type='unix' path='/tmp/vu' mode='server'/></interface>
    <serial type='pty'><target port='0'/></serial>
    <vsock model='virtio'><cid auto='no' address='7'/></vsock>
  </devices></domain>)");
  EXPECT_EQ(f.taps, (std::vector<std::string>{"vnet3", "tapg1b", "tapg1c"}))
      << "the first <target> of each interface, wherever dev is among its attributes";
  EXPECT_EQ(f.vsock_cid, 7u);
  EXPECT_EQ(facts("<domain/>"), domain_xml_facts{});
  EXPECT_EQ(facts(with_devices("<vsock model='virtio'><cid auto='yes'/></vsock>")).vsock_cid, 0u)
      << "no address yet (an inactive domain's auto CID)";
  EXPECT_EQ(facts(with_cid("&#55;")).vsock_cid, 7u) << "a character reference is the same text";
  EXPECT_EQ(facts(with_cid("4294967294")).vsock_cid, 4294967294u);
}

TEST(DomainXml, ViewChannelAndBandwidth) {
  auto f = facts(R"(<domain><devices>
    <interface type='bridge'><target dev='vnet3'/>
      <bandwidth><inbound average='2500' peak='5000'/><outbound average='1250'/></bandwidth>
    </interface>
    <interface type='bridge'><target dev='vnet4'/><bandwidth><inbound average='500'/></bandwidth></interface>
    <interface type='bridge'><target dev='vnet5'/></interface>
    <channel type='unix'><source mode='bind' path='/run/x/ctl.sock'/>
      <target type='virtio' name='org.magnet.ctl.0'/></channel>
    <channel type='unix'><source path='/run/x/view.sock' mode='bind'/>
      <target type='virtio' name='org.magnet.view.0'/></channel>
    <channel type='unix'><source mode='bind' path='/run/x/second.sock'/>
      <target type='virtio' name='org.magnet.view.0'/></channel>
  </devices></domain>)");
  EXPECT_EQ(f.view_channel, "/run/x/view.sock") << "the first channel with magnet's name, not another";
  EXPECT_DOUBLE_EQ(f.allowance_rx_bps, 24e6) << "inbound 2500 + 500 kB/s";
  EXPECT_DOUBLE_EQ(f.allowance_tx_bps, 10e6) << "outbound 1250 kB/s";
  // QEMU connecting out (mode connect) is not a channel the daemon can dial;
  // neither is a pty, whatever its source says.
  EXPECT_EQ(facts(with_devices(R"(<channel type='unix'><source mode='connect' path='/tmp/v.sock'/>
    <target type='virtio' name='org.magnet.view.0'/></channel>
    <channel type='pty'><source mode='bind' path='/tmp/p.sock'/>
    <target type='virtio' name='org.magnet.view.0'/></channel>)"))
                .view_channel,
            "");
}

// A tenant who can write its domain's <metadata> (through a management
// layer) must not claim another VM's CID, taps or view channel.  The regex
// reader took CID 9 in all three documents (checked on it before this
// reader replaced it).
TEST(DomainXml, MetadataImpostorIsNotTheVms) {
  const std::string metadata = R"(<metadata><info xmlns='urn:tenant'>
      <vsock><cid address='9'/></vsock>
      <devices><vsock><cid address='10'/></vsock><interface><target dev='vnet9'/></interface></devices>
      <interface><target dev='vnet9'/></interface>
      <channel type='unix'><source mode='bind' path='/tmp/evil.sock'/>
        <target type='virtio' name='org.magnet.view.0'/></channel>
    </info></metadata>)";
  auto with = facts("<domain type='kvm'><name>g2</name>" + metadata +
                    "<devices><vsock model='virtio'><cid auto='no' address='7'/></vsock></devices></domain>");
  EXPECT_EQ(with.vsock_cid, 7u);
  EXPECT_TRUE(with.taps.empty());
  EXPECT_EQ(with.view_channel, "");
  auto without = facts("<domain type='kvm'><name>g2</name>" + metadata + "<devices/></domain>");
  EXPECT_EQ(without, domain_xml_facts{});
  auto prefixed = facts(slurp(kCorpus / "impostor-metadata-prefixed.xml"));
  EXPECT_EQ(prefixed.vsock_cid, 0u);
  EXPECT_EQ(facts(slurp(kCorpus / "impostor-metadata-default-ns.xml")).vsock_cid, 7u);
}

TEST(DomainXml, CidInACommentOrAnotherElementIsNot) {
  auto c = facts(slurp(kCorpus / "impostor-comment-cdata-pi.xml"));
  EXPECT_EQ(c.vsock_cid, 0u) << "comment, CDATA, processing instruction";
  EXPECT_EQ(c.taps, std::vector<std::string>{"tap0"});
  auto o = facts(slurp(kCorpus / "impostor-other-elements.xml"));
  EXPECT_EQ(o.vsock_cid, 0u) << "under the root, in escaped text, under a controller, an alias";
  EXPECT_TRUE(o.taps.empty()) << "an interface under a hostdev";
  EXPECT_EQ(o.view_channel, "") << "a pty channel, a connecting one";
  // Another namespace's <domain> as the root is not libvirt's.
  EXPECT_NE(parse_error_of(slurp(kCorpus / "bad-root-namespace.xml")), "");
}

TEST(DomainXml, MalformedDocumentsAreErrorsThatSayWhy) {
  EXPECT_NE(parse_error_of(""), "");
  EXPECT_NE(parse_error_of("<domain><devices><vsock><cid address='7'/></vsock>").find("not well-formed"),
            std::string::npos);
  EXPECT_NE(parse_error_of("<domain><devices></domain></devices>").find("line 1"), std::string::npos);
  EXPECT_NE(parse_error_of("<domain/><domain/>"), "");
  EXPECT_NE(parse_error_of(std::string("<domain>\0</domain>", 18)), "");
  EXPECT_NE(parse_error_of("<domain><devices><vsock><cid address='&cid;'/></vsock></devices></domain>"), "");
  EXPECT_NE(parse_error_of("<network/>").find("not <domain>"), std::string::npos);
  std::string big = "<domain><description>" + std::string(kMaxDomainXmlBytes, 'x') + "</description></domain>";
  EXPECT_NE(parse_error_of(big).find("larger than"), std::string::npos);
}

// Entities are never expanded: a DOCTYPE stops the parser before them.
TEST(DomainXml, DoctypeIsRefusedBeforeItsEntities) {
  auto t0 = std::chrono::steady_clock::now();
  std::string why = parse_error_of(slurp(kCorpus / "bad-doctype-billion-laughs.xml"));
  EXPECT_NE(why.find("DOCTYPE"), std::string::npos) << why;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100));
  EXPECT_NE(parse_error_of(slurp(kCorpus / "bad-doctype-external.xml")).find("DOCTYPE"), std::string::npos);
}

// std::stoul threw on the second and wrapped the first to CID 7 (checked on
// the regex reader); std::stod threw on a 400-digit average.
TEST(DomainXml, NumbersOutOfRangeAreErrorsNeverWrappedNorThrown) {
  EXPECT_NE(parse_error_of(with_cid("4294967303")).find("out of range"), std::string::npos);
  EXPECT_NE(parse_error_of(with_cid("99999999999999999999")).find("out of range"), std::string::npos);
  for (const char* reserved : {"0", "1", "2", "4294967295"})
    EXPECT_NE(parse_error_of(with_cid(reserved)).find("reserved CID"), std::string::npos) << reserved;
  for (const char* nan : {"", "+7", "-7", " 7", "7 ", "0x7", "007", "7a", "seven", "7.0"})
    EXPECT_NE(parse_error_of(with_cid(nan)).find("is not a decimal number"), std::string::npos) << "'" << nan << "'";
  EXPECT_NE(parse_error_of(with_devices("<vsock><cid address='7'/></vsock><vsock><cid address='8'/></vsock>"))
                .find("one vsock device"),
            std::string::npos);
  auto bw = [](const std::string& dir, const std::string& v) {
    return with_devices("<interface><bandwidth><" + dir + " average='" + v + "'/></bandwidth></interface>");
  };
  EXPECT_NE(parse_error_of(bw("inbound", std::string(400, '9'))).find("out of range"), std::string::npos);
  EXPECT_NE(parse_error_of(bw("outbound", "-1")).find("not a decimal number"), std::string::npos);
  EXPECT_NE(parse_error_of(bw("outbound", "1e9")).find("not a decimal number"), std::string::npos);
  EXPECT_EQ(parse_error_of(bw("inbound", "18446744073709551615")), "") << "libvirt's own maximum";
}

TEST(DomainXml, TapNamesTheKernelCannotHaveAreErrors) {
  for (const char* dev : {"", "a/b", "a:b", "a b", "abcdefghijklmnop", ".", ".."})
    EXPECT_NE(parse_error_of(with_devices(std::string("<interface><target dev='") + dev + "'/></interface>"))
                  .find("not a network interface name"),
              std::string::npos)
        << "'" << dev << "'";
  EXPECT_EQ(parse_error_of(with_devices("<interface><target dev='abcdefghijklmno'/></interface>")), "")
      << "15 characters fit";
}

// Error messages quote values bounded and printable: a hostile value
// cannot write control characters or pages of text into the log.
TEST(DomainXml, ErrorsQuoteValuesBoundedAndPrintable) {
  std::string why = parse_error_of(with_cid("7&#10;&#9;&#127;\xc3\xa9" + std::string(1000, '8')));
  EXPECT_NE(why.find("/domain/devices/vsock/cid/@address"), std::string::npos) << why;
  EXPECT_LT(why.size(), 200u) << why;
  for (char c : why) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << why;
  // libxml2's own message quotes an element's name.
  why = parse_error_of("<domain><" + std::string(20000, 'a') + "></domain>");
  EXPECT_NE(why.find("not well-formed"), std::string::npos) << why;
  EXPECT_LT(why.size(), 300u) << why;
}

// The fuzz target's seeds are the reader's examples: "bad-*" ones are
// refused, the others read.
TEST(DomainXml, FuzzSeedsAreReadOrRefusedAsNamed) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(kCorpus)) {
    const std::string name = e.path().filename().string();
    const std::string why = parse_error_of(slurp(e.path()));
    if (name.rfind("bad-", 0) == 0)
      EXPECT_NE(why, "") << name << " was accepted";
    else
      EXPECT_EQ(why, "") << name;
    ++n;
  }
  EXPECT_GE(n, 20);
}

}  // namespace
}  // namespace magnet::host
