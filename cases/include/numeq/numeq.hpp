#pragma once
// numeq: the whole C++ interface. Link numeq::numeq (find_package(numeq CONFIG)).
// GoogleTest helpers live apart, in numeq/testing.hpp (include it in test binaries only).

// formats: number formats, the rounding kernel, casts, quantisation
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
#include "numeq/formats/widen.hpp"
// references: exact and certified results
#include "numeq/references/composite.hpp"
#include "numeq/references/exact.hpp"
#include "numeq/references/functions.hpp"
// core: plans, the evaluator, platforms, the bound walker, order discovery
#include "numeq/core/bound.hpp"
#include "numeq/core/evaluate.hpp"
#include "numeq/core/fused.hpp"
#include "numeq/core/plan.hpp"
#include "numeq/core/platform.hpp"
#include "numeq/core/reveal.hpp"
#include "numeq/core/trainium.hpp"
// cases: the operation catalogue, its inputs and verdicts
#include "numeq/cases/bn_stats.hpp"
#include "numeq/cases/elementwise.hpp"
#include "numeq/cases/emulation.hpp"
#include "numeq/cases/generators.hpp"
#include "numeq/cases/normalization.hpp"
#include "numeq/cases/op.hpp"
#include "numeq/cases/port.hpp"
#include "numeq/cases/quantized.hpp"
#include "numeq/cases/variants.hpp"
#include "numeq/cases/verdict.hpp"
