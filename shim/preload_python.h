// LD_PRELOAD into Python (docs/preload.md, "Python programs"): the library
// constructor's Python part. In a preloaded Python process it writes a small
// bootstrap (a `sitecustomize.py` embedded in this library) into a per-user
// folder keyed by the bootstrap's hash and puts that folder first on
// PYTHONPATH; the bootstrap makes fragfree's native adapter PyTorch's
// allocator when `torch` is imported
// (integrations/python/fragfree/_preload.py). Thread-safety:
// SetUpPythonBootstrap runs once, in the constructor, before any thread exists;
// afterwards its results are read-only.
#ifndef FRAGFREE_SHIM_PRELOAD_PYTHON_H_
#define FRAGFREE_SHIM_PRELOAD_PYTHON_H_

namespace fragfree::preload {

// The constructor calls this once when the process is preloaded. Does nothing
// unless the process is a Python interpreter and FRAGFREE_PRELOAD_NATIVE is
// not false; never prints, never fails the process (a bootstrap that cannot be
// written leaves today's interposition, and PythonBootstrapNotice says why).
void SetUpPythonBootstrap();

// In a Python process whose bootstrap could not be installed: the notice line
// (without newline) saying that fragfree interposes and why; else nullptr.
const char* PythonBootstrapNotice();

// The bootstrap's source (what SetUpPythonBootstrap writes).
const char* PythonBootstrapSource();

}  // namespace fragfree::preload

#endif  // FRAGFREE_SHIM_PRELOAD_PYTHON_H_
