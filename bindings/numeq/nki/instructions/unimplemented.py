"""The NKI instructions numeq does not implement yet, each a row of the instruction table without
semantics: a kernel file can import and name them, and calling one raises ``numeq.nki.Unsupported``
with the kernel's line. Implementing one moves its row, with its forms and semantics, to the module
of the engine that runs it. Sources: the nki.isa API reference of the aws-neuron-sdk documentation
(2.26 and later; the Trainium3 instructions from its trn3 pages), and the earlier releases' names.
"""

from __future__ import annotations

from .table import unimplemented

_API = "documented: nki.isa API reference"
_EARLIER = "documented: nki.isa API reference of earlier releases (removed since)"

for _name in ("nc_n_gather", "local_gather", "register_alloc", "register_move", "register_load", "register_store",
              "sequence_bounds", "topk"):
    unimplemented(_name, _API)
for _name in ("tensor_copy_dynamic_src", "tensor_copy_dynamic_dst", "builtin_custom_op"):
    unimplemented(_name, _EARLIER)
