// numeq/formats/shape.hpp: shape text, axis arguments and broadcasting, against numpy's
// documented behaviour (numpy user guide, "Broadcasting": the general rules and their examples;
// numpy.normalize_axis_index for the axis convention; shapes as numpy's repr prints them).

#include <gtest/gtest.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/formats/error.hpp"
#include "oracle/test_support.hpp"
#include "numeq/formats/shape.hpp"

namespace {

using Shape = std::vector<std::size_t>;

using numeq_test::error_message_of;

TEST(Shape, TextAsNumpyPrintsIt) {
  EXPECT_EQ(numeq::shape_text(Shape{}), "()");
  EXPECT_EQ(numeq::shape_text(Shape{4}), "(4,)");
  EXPECT_EQ(numeq::shape_text(Shape{2, 3}), "(2, 3)");
  EXPECT_EQ(numeq::shape_text(Shape{0, 1, 7}), "(0, 1, 7)");
  // An array: its shape.
  const xt::xarray<double> a = xt::zeros<double>({2, 5});
  EXPECT_EQ(numeq::shape_text(a), "(2, 5)");
  EXPECT_EQ(numeq::shape_text(a.shape()), "(2, 5)");
}

TEST(Shape, AxisIndexFollowsNumpy) {
  const Shape s{2, 3, 4};
  EXPECT_EQ(numeq::axis_index(0, s), 0u);
  EXPECT_EQ(numeq::axis_index(2, s), 2u);
  EXPECT_EQ(numeq::axis_index(-1, s), 2u);
  EXPECT_EQ(numeq::axis_index(-3, s), 0u);
  EXPECT_EQ(error_message_of([&] { return numeq::axis_index(3, s); }),
            "axis: 3 is out of range for x of shape (2, 3, 4) (valid: -3 .. 2)");
  EXPECT_EQ(error_message_of([&] { return numeq::axis_index(-4, s, "q"); }),
            "axis: -4 is out of range for q of shape (2, 3, 4) (valid: -3 .. 2)");
  EXPECT_EQ(error_message_of([] { return numeq::axis_index(0, Shape{}); }), "axis: x of shape () has no axis");
}

TEST(Shape, BroadcastAsTheNumpyGuideSays) {
  // The user guide's examples that broadcast.
  EXPECT_EQ(numeq::broadcast_shape(Shape{256, 256, 3}, Shape{3}), (Shape{256, 256, 3}));
  EXPECT_EQ(numeq::broadcast_shape(Shape{8, 1, 6, 1}, Shape{7, 1, 5}), (Shape{8, 7, 6, 5}));
  EXPECT_EQ(numeq::broadcast_shape(Shape{5, 4}, Shape{1}), (Shape{5, 4}));
  EXPECT_EQ(numeq::broadcast_shape(Shape{5, 4}, Shape{4}), (Shape{5, 4}));
  EXPECT_EQ(numeq::broadcast_shape(Shape{15, 3, 5}, Shape{15, 1, 5}), (Shape{15, 3, 5}));
  EXPECT_EQ(numeq::broadcast_shape(Shape{15, 3, 5}, Shape{3, 5}), (Shape{15, 3, 5}));
  EXPECT_EQ(numeq::broadcast_shape(Shape{15, 3, 5}, Shape{3, 1}), (Shape{15, 3, 5}));
  EXPECT_EQ(numeq::broadcast_shape(Shape{}, Shape{2, 3}), (Shape{2, 3}));
  EXPECT_EQ(numeq::broadcast_shape(Shape{0}, Shape{1}), (Shape{0}));  // a 1 stretches to 0 too
  // ... and those that do not.
  EXPECT_EQ(numeq::broadcast_shape(Shape{3}, Shape{4}), std::nullopt);
  EXPECT_EQ(numeq::broadcast_shape(Shape{2, 1}, Shape{8, 4, 3}), std::nullopt);
  EXPECT_EQ(numeq::broadcast_shape(Shape{0}, Shape{2}), std::nullopt);
}

TEST(Shape, BroadcastsToTheResultOnly) {
  // np.broadcast_to(c, result): c may not widen the result.
  EXPECT_TRUE(numeq::broadcasts_to(Shape{4}, Shape{3, 4}));
  EXPECT_TRUE(numeq::broadcasts_to(Shape{3, 1}, Shape{3, 4}));
  EXPECT_TRUE(numeq::broadcasts_to(Shape{}, Shape{3, 4}));
  EXPECT_TRUE(numeq::broadcasts_to(Shape{3, 4}, Shape{3, 4}));
  EXPECT_FALSE(numeq::broadcasts_to(Shape{2, 1, 4}, Shape{3, 4}));  // broadcasts, but to (2, 3, 4)
  EXPECT_FALSE(numeq::broadcasts_to(Shape{3, 4}, Shape{4}));
  EXPECT_FALSE(numeq::broadcasts_to(Shape{5}, Shape{3, 4}));
}

}  // namespace
