#include <gtest/gtest.h>

#include "runtime/error.h"
#include "runtime/topology.h"

using namespace neuron_rt;

TEST(Topology, DefaultIsOneTrn2ChipWithFourLogicalCoresOf24GiB) {
  std::map<std::string, std::string> env;
  Topology topology = Topology::from_environment(&env);
  EXPECT_EQ(topology.platform_name(), "trn2");
  EXPECT_EQ(topology.logical_nc_config, 2);
  ASSERT_EQ(topology.visible.size(), 4u);
  EXPECT_EQ(topology.visible[3].hbm_bytes, 24ull << 30);
  EXPECT_EQ(topology.visible[3].first_physical_core, 6);
}

TEST(Topology, Trn2WithLnc1HasEightCoresOf12GiB) {
  std::map<std::string, std::string> env{{"NEURON_LOGICAL_NC_CONFIG", "1"}};
  Topology topology = Topology::from_environment(&env);
  ASSERT_EQ(topology.visible.size(), 8u);
  EXPECT_EQ(topology.visible[0].hbm_bytes, 12ull << 30);
}

TEST(Topology, Trn1HasTwoCoresOf16GiBPerChip) {
  std::map<std::string, std::string> env{{"NEURON_SIM_PLATFORM", "trn1"}, {"NEURON_SIM_CHIPS", "16"}};
  Topology topology = Topology::from_environment(&env);
  ASSERT_EQ(topology.visible.size(), 32u);
  EXPECT_EQ(topology.visible[31].hbm_bytes, 16ull << 30);
  EXPECT_EQ(topology.visible[31].chip, 15);
}

TEST(Topology, VisibleCoresSelectsAndRenumbers) {
  std::map<std::string, std::string> env{{"NEURON_RT_VISIBLE_CORES", "1-2"}};
  Topology topology = Topology::from_environment(&env);
  ASSERT_EQ(topology.visible.size(), 2u);
  EXPECT_EQ(topology.visible[0].global_index, 1);
  EXPECT_EQ(topology.visible[1].global_index, 2);
  EXPECT_EQ(parse_core_list("3,0,1-2,1", 4), (std::vector<int>{0, 1, 2, 3}));
}

TEST(Topology, BadSettingsNameTheSetting) {
  auto expect_error = [](std::map<std::string, std::string> env, const std::string& fragment) {
    try {
      Topology::from_environment(&env);
      FAIL() << "expected an error mentioning " << fragment;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
  };
  expect_error({{"NEURON_RT_VISIBLE_CORES", "4"}}, "core 4 does not exist");
  expect_error({{"NEURON_RT_VISIBLE_CORES", "x"}}, "NEURON_RT_VISIBLE_CORES");
  expect_error({{"NEURON_SIM_PLATFORM", "trn9"}}, "NEURON_SIM_PLATFORM");
  expect_error({{"NEURON_SIM_PLATFORM", "trn1"}, {"NEURON_LOGICAL_NC_CONFIG", "2"}}, "trn1");
  expect_error({{"NEURON_LOGICAL_NC_CONFIG", "3"}}, "must be 1 or 2");
}

TEST(Topology, Trn3HasFourLogicalCoresOf36GiBPerChip) {
  std::map<std::string, std::string> env{{"NEURON_SIM_PLATFORM", "trn3"}};
  Topology topology = Topology::from_environment(&env);
  EXPECT_EQ(topology.platform_name(), "trn3");
  EXPECT_EQ(topology.logical_nc_config, 2);
  ASSERT_EQ(topology.visible.size(), 4u);
  EXPECT_EQ(topology.visible[0].hbm_bytes, 36ull << 30);
}
