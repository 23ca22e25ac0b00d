// Pickle writer for Value trees, protocol 2, using only the opcodes PyTorch's
// MemoryViz unpickler accepts (reference/pytorch_allocator.md §2: PROTO,
// EMPTY_DICT/LIST, MARK, APPENDS, SETITEMS, TUPLE, BININT1/2, BININT, LONG1,
// BINFLOAT, BINUNICODE, NONE, NEWTRUE/NEWFALSE, STOP), so a snapshot written
// here opens in torch.cuda._memory_viz and pytorch.org/memory_viz as well as in
// Python's pickle.load.
// Thread-safety: pure function.
#ifndef FRAGFREE_ALLOCATOR_OBS_PICKLE_H_
#define FRAGFREE_ALLOCATOR_OBS_PICKLE_H_

#include <string>

#include "allocator/obs/value.h"

namespace fragfree {

std::string ToPickle(const Value& value);

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OBS_PICKLE_H_
