// runtime/env: numeric variables are read strictly, and a nonsense value is
// an error naming the variable rather than silently the default.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "runtime/src/env.h"
#include "sinkrt/device/device_options.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/remote_device.h"
#include "support/scoped_env.h"

namespace sinkrt {
namespace {

using testing::ScopedEnv;

TEST(EnvTest, NonsenseNumbersAreErrorsNamingTheVariableAndValue) {
  for (const char* name :
       {"SINKRT_CONNECT_TIMEOUT_MS", "SINKRT_GETNEXT_TIMEOUT_MS", "SINKRT_PUSH_TIMEOUT_MS", "SINKRT_SINK_TIMEOUT_MS",
        "SINKRT_REPLY_TIMEOUT_MS", "SINKRT_PEER_TIMEOUT_MS", "SINKRT_DEVICE_THREADS", "SINKRT_MAX_FRAME_BYTES",
        "HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT"}) {
    for (const char* value : {"abc", "-5", "10s", " 5", "1e3", "99999999999999999999999"}) {
      SCOPED_TRACE(std::string(name) + "=" + value);
      ScopedEnv env(name, value);
      Status st = CheckEnvironment();
      ASSERT_FALSE(st.ok());
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(st.message().find(name), std::string::npos) << st.message();
      EXPECT_NE(st.message().find(std::string("'") + value + "'"), std::string::npos) << st.message();
    }
  }
}

TEST(EnvTest, SensibleNumbersAndZeroAreAccepted) {
  // HCCL_* at 0 is documented as ignored (MindSpore's "unset"), not an error.
  ScopedEnv a("HCCL_CONNECT_TIMEOUT", "0");
  ScopedEnv b("HCCL_EXEC_TIMEOUT", "0");
  ScopedEnv c("SINKRT_GETNEXT_TIMEOUT_MS", "1500");
  ScopedEnv d("SINKRT_DEVICE_THREADS", "");  // empty reads as unset
  EXPECT_TRUE(CheckEnvironment().ok()) << CheckEnvironment().ToString();
  const PeerTimeouts t = PeerTimeoutsFromEnvironment({});
  EXPECT_EQ(t.peer, PeerTimeouts{}.peer);
  EXPECT_EQ(t.rendezvous, PeerTimeouts{}.rendezvous);
  EXPECT_EQ(device::DeviceOptions::FromEnvironment().get_next_timeout.count(), 1500);
}

TEST(EnvTest, GarbageThreadCountIsNotZeroThreads) {
  // atoi read "abc" as 0, i.e. "every core": the reader now skips it (and
  // CheckEnvironment reports it).
  ScopedEnv bad("SINKRT_DEVICE_THREADS", "3x");
  EXPECT_EQ(device::DeviceOptions::FromEnvironment().threads, device::DeviceOptions{}.threads);
  EXPECT_FALSE(CheckEnvironment().ok());
  ScopedEnv good("SINKRT_DEVICE_THREADS", "3");
  EXPECT_EQ(device::DeviceOptions::FromEnvironment().threads, 3);
}

// The library meets the error the tools give. The readers themselves skip
// a nonsense value (they have no error path); the entry points refuse it.
TEST(EnvTest, ModelCreateRefusesNonsenseNamingTheVariable) {
  ScopedEnv env("SINKRT_GETNEXT_TIMEOUT_MS", "-5");
  device::InProcessDevice device;  // its options silently skipped the value
  auto model = host::Model::Create(host::MakeMlpNetwork(8), host::LossSpec::SparseSoftmaxCrossEntropy(),
                                   host::OptimizerSpec{}, device);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("SINKRT_GETNEXT_TIMEOUT_MS='-5'"), std::string::npos)
      << model.status().message();
}

TEST(EnvTest, RemoteConnectRefusesNonsenseBeforeDialing) {
  // Port 1 on loopback: nothing listens, and nothing is dialed anyway; a
  // silent default would have waited out the default timeout.
  ScopedEnv env("SINKRT_CONNECT_TIMEOUT_MS", "abc");
  auto remote = host::RemoteDevice::Connect(Address{"127.0.0.1", 1});
  ASSERT_FALSE(remote.ok());
  EXPECT_EQ(remote.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(remote.status().message().find("SINKRT_CONNECT_TIMEOUT_MS='abc'"), std::string::npos)
      << remote.status().message();
}

TEST(EnvTest, NewVariablesAreCheckedAndRead) {
  {
    ScopedEnv env("SINKRT_PROGRESS_MS", "soon");
    EXPECT_FALSE(CheckEnvironment().ok());
    EXPECT_EQ(ProgressIntervalFromEnvironment(std::chrono::milliseconds(7)).count(), 7);
  }
  {
    ScopedEnv env("SINKRT_PROGRESS_MS", "250");
    EXPECT_TRUE(CheckEnvironment().ok());
    EXPECT_EQ(ProgressIntervalFromEnvironment(std::chrono::milliseconds(7)).count(), 250);
    EXPECT_EQ(host::RemoteOptions::FromEnvironment().progress_interval.count(), 250);
  }
  ScopedEnv env("SINKRT_MAX_LOCAL_DEVICES", "many");
  Status st = CheckEnvironment();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("SINKRT_MAX_LOCAL_DEVICES='many'"), std::string::npos) << st.message();
}

TEST(EnvTest, HierarchicalAllReduceIsAKnobOfZeroOrOne) {
  EXPECT_TRUE(device::DeviceOptions::FromEnvironment().hierarchical_allreduce);
  {
    ScopedEnv env("SINKRT_HIERARCHICAL_ALLREDUCE", "0");
    EXPECT_TRUE(CheckEnvironment().ok());
    EXPECT_FALSE(device::DeviceOptions::FromEnvironment().hierarchical_allreduce);
  }
  {
    ScopedEnv env("SINKRT_HIERARCHICAL_ALLREDUCE", "1");
    EXPECT_TRUE(device::DeviceOptions::FromEnvironment().hierarchical_allreduce);
  }
  {
    // A switch like the others: "off" is one of its spellings.
    ScopedEnv env("SINKRT_HIERARCHICAL_ALLREDUCE", "off");
    EXPECT_TRUE(CheckEnvironment().ok());
    EXPECT_FALSE(device::DeviceOptions::FromEnvironment().hierarchical_allreduce);
  }
  ScopedEnv env("SINKRT_HIERARCHICAL_ALLREDUCE", "2");
  Status st = CheckEnvironment();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("SINKRT_HIERARCHICAL_ALLREDUCE='2' is not a boolean"), std::string::npos) << st.message();
  // Unreadable: the default, as for every variable.
  EXPECT_TRUE(device::DeviceOptions::FromEnvironment().hierarchical_allreduce);
}

// Issue 39: SINKRT_COMM_SHM=false left shared memory on (only "0" was
// off), SINKRT_SHARED_ARENA=yes was off (only "1" was on), and
// SINKRT_WORKER_TEAM=abc was taken as on. Every switch now reads the
// documented spellings and refuses the rest, naming variable and value.
TEST(EnvTest, SwitchesReadEverySpellingAndRefuseTheRest) {
  struct Switch {
    const char* name;
    bool device::DeviceOptions::*field;
  };
  const Switch switches[] = {{"SINKRT_COMM_SHM", &device::DeviceOptions::shared_memory},
                             {"SINKRT_SHARED_ARENA", &device::DeviceOptions::shared_arena},
                             {"SINKRT_WORKER_TEAM", &device::DeviceOptions::worker_team},
                             {"SINKRT_PIN_THREADS", &device::DeviceOptions::pin_threads},
                             {"SINKRT_HIERARCHICAL_ALLREDUCE", &device::DeviceOptions::hierarchical_allreduce}};
  for (const Switch& sw : switches) {
    for (const char* on : {"1", "true", "TRUE", "yes", "Yes", "on"}) {
      SCOPED_TRACE(std::string(sw.name) + "=" + on);
      ScopedEnv env(sw.name, on);
      EXPECT_TRUE(CheckEnvironment().ok()) << CheckEnvironment().ToString();
      EXPECT_TRUE(device::DeviceOptions::FromEnvironment().*sw.field);
    }
    for (const char* off : {"0", "false", "False", "no", "off", "OFF"}) {
      SCOPED_TRACE(std::string(sw.name) + "=" + off);
      ScopedEnv env(sw.name, off);
      EXPECT_TRUE(CheckEnvironment().ok()) << CheckEnvironment().ToString();
      EXPECT_FALSE(device::DeviceOptions::FromEnvironment().*sw.field);
    }
    for (const char* bad : {"abc", "2", "-1", "y", " 1", "enabled"}) {
      SCOPED_TRACE(std::string(sw.name) + "=" + bad);
      ScopedEnv env(sw.name, bad);
      Status st = CheckEnvironment();
      ASSERT_FALSE(st.ok());
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(st.message().find(std::string(sw.name) + "='" + bad +
                                  "' is not a boolean (1, true, yes or on; 0, "
                                  "false, no or off)"),
                std::string::npos)
          << st.message();
      // The reader keeps the default rather than guess.
      EXPECT_EQ(device::DeviceOptions::FromEnvironment().*sw.field, device::DeviceOptions{}.*sw.field);
    }
  }
}

TEST(EnvTest, ANumberTooLargeIsOutOfRangeNotGarbage) {
  ScopedEnv env("SINKRT_GETNEXT_TIMEOUT_MS", "99999999999999999999999");
  Status st = CheckEnvironment();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("SINKRT_GETNEXT_TIMEOUT_MS='99999999999999999999999' is out of range (at most "
                              "9223372036854775807)"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(ParseNonNegativeInteger("9223372036854775807"), 9223372036854775807LL);
  EXPECT_FALSE(ParseNonNegativeInteger("9223372036854775808"));
  EXPECT_FALSE(ParseNonNegativeInteger("+5"));
  EXPECT_FALSE(ParseNonNegativeInteger(""));
}

}  // namespace
}  // namespace sinkrt
