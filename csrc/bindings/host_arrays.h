// The read-only, C-contiguous host arrays the binding files take from NumPy.
#pragma once

#include <cstdint>

#include <nanobind/ndarray.h>

namespace muser::bindings {

using Bytes1D = nanobind::ndarray<const uint8_t, nanobind::ndim<1>, nanobind::c_contig, nanobind::device::cpu>;
using Floats1D = nanobind::ndarray<const float, nanobind::ndim<1>, nanobind::c_contig, nanobind::device::cpu>;
using Floats2D = nanobind::ndarray<const float, nanobind::ndim<2>, nanobind::c_contig, nanobind::device::cpu>;
using U16s1D = nanobind::ndarray<const uint16_t, nanobind::ndim<1>, nanobind::c_contig, nanobind::device::cpu>;
using U16s2D = nanobind::ndarray<const uint16_t, nanobind::ndim<2>, nanobind::c_contig, nanobind::device::cpu>;

}  // namespace muser::bindings
