// cpu_dispatch.hpp: the one place that reads the CPU's instruction sets and NUMEQ_ISA. The oracle
// for the detection is the kernel's own report of the CPU's flags (/proc/cpuinfo), not the
// compiler builtin the code uses.

#include "numeq/formats/cpu_dispatch.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "numeq/formats/error.hpp"

namespace {

// The first "flags" line of /proc/cpuinfo as a set; empty where there is none (not Linux x86).
std::set<std::string> cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

class EnvScope {
 public:
  explicit EnvScope(const char* value) { setenv("NUMEQ_ISA", value, 1); }
  ~EnvScope() { unsetenv("NUMEQ_ISA"); }
  EnvScope(const EnvScope&) = delete;
  EnvScope& operator=(const EnvScope&) = delete;
};

TEST(CpuDispatch, DetectionAgreesWithTheKernelsFlags) {
  const std::set<std::string> f = cpu_flags();
  if (f.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  const bool has512 = f.count("avx512f") && f.count("avx512dq") && f.count("avx512vl") && f.count("avx512bw");
  const bool has2 = f.count("avx2") && f.count("fma");
  const numeq::Isa want = has512 ? numeq::Isa::avx512 : has2 ? numeq::Isa::avx2 : numeq::Isa::portable;
  EXPECT_EQ(numeq::detected_isa(), want) << "detected " << numeq::to_string(numeq::detected_isa());
}

TEST(CpuDispatch, EnvironmentLowersAndNeverRaises) {
  unsetenv("NUMEQ_ISA");
  const numeq::Isa cpu = numeq::detected_isa();
  EXPECT_EQ(numeq::current_isa(), cpu);
  for (const numeq::Isa wanted : {numeq::Isa::portable, numeq::Isa::avx2, numeq::Isa::avx512}) {
    const std::string name(numeq::to_string(wanted));
    const EnvScope scope(name.c_str());
    EXPECT_EQ(numeq::current_isa(), wanted < cpu ? wanted : cpu) << name;
  }
  {
    const EnvScope empty("");
    EXPECT_EQ(numeq::current_isa(), cpu);  // set but empty: as if unset
  }
}

TEST(CpuDispatch, AChoiceIsAvailableExactlyWhereTheCpuHasIt) {
  const numeq::Isa cpu = numeq::detected_isa();
  using numeq::KernelChoice;
  for (const KernelChoice c : {KernelChoice::automatic, KernelChoice::none, KernelChoice::portable})
    EXPECT_TRUE(numeq::available(c));
  EXPECT_EQ(numeq::available(KernelChoice::avx2), cpu >= numeq::Isa::avx2);
  EXPECT_EQ(numeq::available(KernelChoice::avx512), cpu >= numeq::Isa::avx512);
}

TEST(CpuDispatch, UnknownValueNamesTheVariableAndTheChoices) {
  const EnvScope scope("sse9");
  try {
    (void)numeq::current_isa();
    FAIL() << "NUMEQ_ISA=sse9 was accepted";
  } catch (const numeq::error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("NUMEQ_ISA"), std::string::npos) << m;
    EXPECT_NE(m.find("sse9"), std::string::npos) << m;
    EXPECT_NE(m.find("portable, avx2, avx512"), std::string::npos) << m;
  }
}

}  // namespace
