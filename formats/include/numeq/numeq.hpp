#pragma once
// numeq: the whole C++ interface. Link numeq::numeq (find_package(numeq CONFIG)).

#include "numeq/formats/array.hpp"
#include "numeq/formats/block_scale.hpp"
#include "numeq/formats/cast.hpp"
#include "numeq/formats/error.hpp"
#include "numeq/formats/format.hpp"
#include "numeq/formats/parallel.hpp"
#include "numeq/formats/quantize.hpp"
#include "numeq/formats/random.hpp"
#include "numeq/formats/round_and_pack.hpp"
#include "numeq/formats/rounding.hpp"
