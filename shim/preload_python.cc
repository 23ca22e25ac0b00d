// LD_PRELOAD into Python: the bootstrap that makes fragfree's native adapter
// PyTorch's allocator without a code change (docs/preload.md, "Python
// programs"). This file owns the bootstrap's source (embedded, so that
// libfragfree.so works as one file wherever it is copied), writing it to a
// per-user cache folder named after its hash (temp file + rename, so readers
// never see a partial file), and prepending that folder to PYTHONPATH. The
// bootstrap itself undoes the PYTHONPATH entry, so the program and its
// children see their own value; a child that is preloaded again gets the
// folder again from its own constructor, never twice (the first entry is
// checked).
// Safety: the folder is used only when it is a directory owned by this user
// and writable by nobody else, and the file is rewritten unless its content is
// exactly the embedded source, so no other user can plant code in it.
// Thread-safety: SetUpPythonBootstrap runs once, in the constructor, before any
// thread exists; the notice it may leave is read-only afterwards.
#include "shim/preload_python.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace fragfree::preload {
namespace {

// Imported by Python as `sitecustomize` (this folder is first on PYTHONPATH).
// Keep it small and compatible with Python 3.8+; its logic beyond finding the
// package lives in the fragfree package (fragfree/_preload.py), found next to
// this library or installed.
constexpr char kBootstrap[] =
    R"py(# fragfree's LD_PRELOAD bootstrap, written by libfragfree.so
# (shim/preload_python.cc) into a folder that its constructor put first on
# PYTHONPATH, so Python imports it as `sitecustomize`. It puts PYTHONPATH and
# sys.path back as they were, runs the program's own sitecustomize (the next
# one on sys.path), and once `torch` has finished importing asks the fragfree
# package (fragfree._preload) to make its native adapter PyTorch's allocator,
# printing one line on stderr that says which mode is active.
# docs/preload.md, "Python programs".


def _fragfree_bootstrap():
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    # libfragfree wrote "<here>" (PYTHONPATH was unset or empty) or
    # "<here>:<the program's value>".
    value = os.environ.get("PYTHONPATH")
    if value is not None:
        head, sep, rest = value.partition(os.pathsep)
        if head == here:
            if sep:
                os.environ["PYTHONPATH"] = rest
            else:
                del os.environ["PYTHONPATH"]
    sys.path[:] = [p for p in sys.path if p != here]
    sys.path_importer_cache.pop(here, None)

    interposing = "fragfree: LD_PRELOAD: interposing cudaMalloc/cudaMallocAsync (%s)"

    # Finding the package is the one thing done here rather than in it: the
    # package beside the preloaded library must win over another one on
    # sys.path, and nothing of it can be imported before it is found. So
    # library_path is fragfree._library.preloaded_library_path, and
    # package_roots inverts fragfree._library.candidate_paths (the package's
    # test_preload_python.py checks that); everything after the import is
    # the package's (fragfree._preload).
    def library_path():
        import ctypes

        try:
            addr = ctypes.cast(ctypes.CDLL(None).ff_version, ctypes.c_void_p).value
            with open("/proc/self/maps") as maps:
                for line in maps:
                    fields = line.split(None, 5)
                    lo, _, hi = fields[0].partition("-")
                    if len(fields) == 6 and int(lo, 16) <= addr < int(hi, 16):
                        return fields[5].strip()
        except (AttributeError, OSError, ValueError):
            pass
        return None

    def package_roots(lib):
        # The library inside the package (fragfree/ or fragfree/lib/), or in
        # <repo>/build*/lib/ of a source tree (<repo>/integrations/python).
        d = os.path.dirname(os.path.realpath(lib))
        up = os.path.dirname(d)
        for root in (up, os.path.dirname(up),
                     os.path.join(os.path.dirname(up), "integrations", "python")):
            if os.path.isfile(os.path.join(root, "fragfree", "_preload.py")):
                yield root

    def import_fragfree():
        import importlib

        lib = library_path()
        for root in package_roots(lib) if lib else ():
            sys.path.insert(0, root)
            try:
                return importlib.import_module("fragfree")
            finally:
                if root in sys.path:
                    sys.path.remove(root)
                sys.path_importer_cache.pop(root, None)
        try:
            return importlib.import_module("fragfree")
        except ModuleNotFoundError as e:
            if e.name != "fragfree":
                raise
            return None

    def activate():
        try:
            fragfree = sys.modules.get("fragfree") or import_fragfree()
            if fragfree is None:
                line = interposing % (
                    "the fragfree Python package was not found: install it, or keep "
                    "libfragfree.so inside it or in build/lib of its source tree")
            else:
                try:
                    from fragfree import _preload
                except ImportError:
                    line = interposing % ("the fragfree package at %s has no LD_PRELOAD "
                                          "support" % os.path.dirname(fragfree.__file__))
                else:
                    line = _preload.activate()
        except Exception as e:
            line = interposing % ("fragfree could not set up its native adapter: %s: %s"
                                  % (type(e).__name__, e))
        if line and sys.stderr is not None:
            try:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
            except Exception:
                pass

    class Loader:
        # torch's own loader, plus activate() once torch/__init__ has run.
        def __init__(self, loader):
            self._fragfree_loader = loader

        def __getattr__(self, name):
            return getattr(self._fragfree_loader, name)

        def create_module(self, spec):
            create = getattr(self._fragfree_loader, "create_module", None)
            return create(spec) if create is not None else None

        def exec_module(self, module):
            loader = self._fragfree_loader
            try:
                loader.exec_module(module)
            finally:
                if getattr(module, "__loader__", None) is self:
                    module.__loader__ = loader
                spec = getattr(module, "__spec__", None)
                if spec is not None and spec.loader is self:
                    spec.loader = loader
            finder.finish()

    class Finder:
        # Hands `torch`'s spec, found by the finders after it, a Loader.
        busy = False
        done = False

        def find_spec(self, name, path=None, target=None):
            if name != "torch" or self.busy or self.done:
                return None
            self.busy = True
            try:
                for other in list(sys.meta_path):
                    find = getattr(other, "find_spec", None)
                    if other is self or find is None:
                        continue
                    spec = find(name, path, target)
                    if spec is not None:
                        break
                else:
                    return None
            finally:
                self.busy = False
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = Loader(spec.loader)
            return spec

        def finish(self):
            if self.done:
                return
            self.done = True
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            activate()

    finder = Finder()
    sys.meta_path.insert(0, finder)
    # Let the program's own sitecustomize load in this one's place.
    if sys.modules.get("sitecustomize") is not None:
        del sys.modules["sitecustomize"]
    try:
        import sitecustomize  # noqa: F401  (the program's own)
    except ImportError as e:
        if e.name != "sitecustomize":
            raise
        # None: tell site.py so, as it would be told without fragfree.
        raise ImportError("no sitecustomize", name="sitecustomize") from None
    finally:
        if "torch" in sys.modules:  # imported by the program's sitecustomize
            finder.finish()


try:
    _fragfree_bootstrap()
finally:
    del _fragfree_bootstrap
)py";

// Set when the bootstrap could not be installed in a Python process.
char notice[512];

bool EnvFalse(const char* name) {
  const char* v = getenv(name);
  if (v == nullptr) return false;
  std::string s(v);
  for (char& c : s) c = char(tolower(static_cast<unsigned char>(c)));
  return s == "0" || s == "false" || s == "no" || s == "n" || s == "off";
}

// A Python interpreter exports its entry points (python3 links libpython
// statically with -export-dynamic, or links libpython3.x.so).
bool IsPython() {
  return dlsym(RTLD_DEFAULT, "Py_BytesMain") != nullptr ||
         dlsym(RTLD_DEFAULT, "Py_Main") != nullptr;
}

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Creates `path` and its missing parents (mode 0700).
void MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      mkdir(path.substr(0, i).c_str(), 0700);  // EEXIST is fine
    }
  }
}

// A directory owned by this user that nobody else can write to.
bool Private(const std::string& dir) {
  struct stat st;
  return lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
         st.st_uid == geteuid() && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

bool SameContent(const std::string& file, std::string_view want) {
  int fd = open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  std::string got(want.size() + 1, '\0');
  size_t n = 0;
  while (n < got.size()) {
    ssize_t r = read(fd, got.data() + n, got.size() - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += size_t(r);
  }
  close(fd);
  return n == want.size() && std::string_view(got.data(), n) == want;
}

// Writes `content` to `file` atomically. Returns 0 or an errno.
int WriteAtomically(const std::string& file, std::string_view content) {
  const std::string tmp =
      file + ".tmp." + std::to_string(static_cast<long>(getpid()));
  int fd = open(tmp.c_str(),
                O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  size_t done = 0;
  int err = 0;
  while (done < content.size()) {
    ssize_t w = write(fd, content.data() + done, content.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      err = w < 0 ? errno : EIO;
      break;
    }
    done += size_t(w);
  }
  if (close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && rename(tmp.c_str(), file.c_str()) != 0) err = errno;
  if (err != 0) unlink(tmp.c_str());
  return err;
}

// The bootstrap folder under `base` (created if needed), or "" with *why set.
std::string InstallUnder(const std::string& base, const std::string& leaf,
                         std::string* why) {
  const std::string dir = base + "/" + leaf;
  MakeDirs(dir);
  if (!Private(dir)) {
    *why = dir + " is not a private directory of this user";
    return "";
  }
  const std::string file = dir + "/sitecustomize.py";
  const std::string_view content(kBootstrap, sizeof(kBootstrap) - 1);
  if (SameContent(file, content)) return dir;
  if (int err = WriteAtomically(file, content); err != 0) {
    *why = file + ": " + strerror(err);
    return "";
  }
  return dir;
}

}  // namespace

const char* PythonBootstrapSource() { return kBootstrap; }

const char* PythonBootstrapNotice() {
  return notice[0] != '\0' ? notice : nullptr;
}

void SetUpPythonBootstrap() {
  if (EnvFalse("FRAGFREE_PRELOAD_NATIVE") || !IsPython()) return;
  char leaf[64];
  snprintf(leaf, sizeof(leaf), "python-bootstrap-%016llx",
           static_cast<unsigned long long>(
               Fnv1a(std::string_view(kBootstrap, sizeof(kBootstrap) - 1))));
  // $XDG_CACHE_HOME/fragfree, ~/.cache/fragfree, then $TMPDIR/fragfree-<uid>.
  std::string bases[2];
  const char* xdg = getenv("XDG_CACHE_HOME");
  const char* home = getenv("HOME");
  const char* tmp = getenv("TMPDIR");
  if (xdg != nullptr && xdg[0] == '/') {
    bases[0] = std::string(xdg) + "/fragfree";
  } else if (home != nullptr && home[0] == '/') {
    bases[0] = std::string(home) + "/.cache/fragfree";
  }
  bases[1] = std::string(tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp") +
             "/fragfree-" + std::to_string(static_cast<long>(geteuid()));
  std::string dir, why;
  for (const std::string& base : bases) {
    if (base.empty()) continue;
    // A shared parent (/tmp) needs a private folder of ours in between.
    if (&base == &bases[1]) {
      MakeDirs(base);
      if (!Private(base)) {
        why = base + " is not a private directory of this user";
        continue;
      }
    }
    dir = InstallUnder(base, leaf, &why);
    if (!dir.empty()) break;
  }
  if (dir.empty()) {
    snprintf(notice, sizeof(notice),
             "fragfree: LD_PRELOAD: interposing cudaMalloc/cudaMallocAsync "
             "(could not write the Python bootstrap: %s)",
             why.c_str());
    return;
  }
  const char* old = getenv("PYTHONPATH");
  if (old == nullptr || old[0] == '\0') {
    setenv("PYTHONPATH", dir.c_str(), 1);
    return;
  }
  const std::string_view current(old);
  const std::string_view head = current.substr(0, current.find(':'));
  if (head == dir) return;  // an ancestor's, not undone: use it as is
  setenv("PYTHONPATH", (dir + ":" + old).c_str(), 1);
}

}  // namespace fragfree::preload
