// MakeRoom: the admission rule sinkd and the rendezvous master share
// (runtime/admission.h), on lists of pending connections made by hand.
#include <gtest/gtest.h>

#include <vector>

#include "sinkrt/runtime/admission.h"

namespace sinkrt {
namespace {

const PendingQuotas kQuotas{4, 2};  // 4 in all, 2 per address

TEST(AdmissionTest, UnderBothQuotasTheNewcomerComesIn) {
  const std::vector<PendingView> pending = {{"10.0.0.1"}, {"10.0.0.2"}};
  const RoomVerdict v = MakeRoom(pending, "10.0.0.1", kQuotas);
  EXPECT_TRUE(v.admit);
  EXPECT_FALSE(v.evict);
}

TEST(AdmissionTest, OverTheAddressQuotaTheOldestOfThatAddressGoes) {
  const std::vector<PendingView> pending = {{"10.0.0.2"}, {"10.0.0.1"}, {"10.0.0.1"}};
  const RoomVerdict v = MakeRoom(pending, "10.0.0.1", kQuotas);
  ASSERT_TRUE(v.evict);
  EXPECT_EQ(*v.evict, 1u);
  EXPECT_EQ(v.why, "2 connections from 10.0.0.1 have not finished their Hello (the limit per address)");
}

TEST(AdmissionTest, OverTheTotalTheAddressHoldingMostLosesItsOldest) {
  const std::vector<PendingView> pending = {{"10.0.0.1"}, {"10.0.0.2"}, {"10.0.0.3"}, {"10.0.0.2"}};
  const RoomVerdict v = MakeRoom(pending, "10.0.0.4", kQuotas);
  ASSERT_TRUE(v.evict);
  EXPECT_EQ(*v.evict, 1u);
  EXPECT_EQ(v.why, "4 connections have not finished their Hello (the limit), 2 of them from 10.0.0.2");
}

// A connection with bytes waiting is about to be served, not silent: it is
// spared, and the next oldest of its address goes instead.
TEST(AdmissionTest, AConnectionWithUnreadBytesIsSpared) {
  const std::vector<PendingView> pending = {{"10.0.0.1", true}, {"10.0.0.1", false}};
  const RoomVerdict v = MakeRoom(pending, "10.0.0.1", kQuotas);
  ASSERT_TRUE(v.evict);
  EXPECT_EQ(*v.evict, 1u);
}

// When every candidate has bytes waiting (a burst of real clients), the
// newcomer still comes in up to twice the total, and is refused beyond.
TEST(AdmissionTest, ABurstIsAdmittedUpToTwiceTheTotal) {
  std::vector<PendingView> pending(7, PendingView{"10.0.0.1", true});
  RoomVerdict v = MakeRoom(pending, "10.0.0.1", kQuotas);
  EXPECT_FALSE(v.evict);
  EXPECT_TRUE(v.admit);
  pending.push_back({"10.0.0.1", true});
  v = MakeRoom(pending, "10.0.0.1", kQuotas);
  EXPECT_FALSE(v.evict);
  EXPECT_FALSE(v.admit);
}

}  // namespace
}  // namespace sinkrt
