#!/usr/bin/env python3
"""Checks that gst-cudadiff uses no GStreamer API newer than its minimum
version (meson.build's gst_min, 1.20) outside the guards that keep that API
out of builds against the minimum.

The versions come from the GObject-introspection files of the installed
GStreamer (Gst-1.0.gir, GstVideo-1.0.gir, ... in --gir-dir, default
/usr/share/gir-1.0; Debian and Ubuntu ship them in the -dev packages): every
function, method, macro, constant, type and enum member added after 1.0
carries version="1.xx" there. Two things are checked:

  1. the undefined dynamic symbols (nm -D --undefined-only) named gst_* or
     _gst_* of every executable and shared library of the meson build
     directory BUILD (its meson-info/intro-targets.json; targets not built
     are left out and counted);
  2. the GStreamer names (gst_*, GST_*, Gst*) written in the sources
     (plugins/, tools/, tests/, bench/, cuda/): macros, enum members and
     inline functions leave no symbol, and code under a version guard is
     not compiled in every build.

A name newer than --gst-min fails the check unless ALLOWED below lists it with
the guard or meson option that keeps it out of builds against the minimum. A
symbol found in no GIR file fails too unless NOT_IN_GIR lists it with the
reason it is old enough. Exit status: 0 passed, 1 failed, 77 (skipped) when
nm, the GIR files or the build's target list are missing.

    python3 scripts/check-gst-api-versions.py BUILD [--gst-min 1.20] [--gir-dir DIR] [-v]
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

SKIP = 77

# Used only where the minimum version cannot reach them: name -> the guard.
GST_CUDA = ("meson option gst-cuda (gstreamer-cuda-1.0 >= 1.22, CUDADIFF_HAVE_GST_CUDA); "
            "GStreamer's CUDA library is public since 1.22")
GST_CUDA_1_24 = ("meson option gst-cuda and GST_CHECK_VERSION(1, 24, 0) "
                 "(plugins/common/gstcudadiffcudamem.cpp)")
ALLOWED = {
    # symbols (and the names in the sources) of the device-resident frames
    "gst_context_new_cuda_context": GST_CUDA,
    "gst_cuda_buffer_pool_get_type": GST_CUDA,
    "gst_cuda_buffer_pool_new": GST_CUDA,
    "gst_cuda_context_get_handle": GST_CUDA,
    "gst_cuda_context_get_type": GST_CUDA,
    "gst_cuda_context_new": GST_CUDA,
    "gst_cuda_context_new_wrapped": GST_CUDA,
    "gst_cuda_context_pop": GST_CUDA,
    "gst_cuda_context_push": GST_CUDA,
    "gst_cuda_handle_context_query": GST_CUDA,
    "gst_cuda_handle_set_context": GST_CUDA,
    "gst_cuda_load_library": GST_CUDA,
    "gst_cuda_memory_init_once": GST_CUDA,
    "gst_is_cuda_memory": GST_CUDA,
    "GST_CUDA_CONTEXT_TYPE": GST_CUDA,
    "GST_TYPE_CUDA_CONTEXT": GST_CUDA,
    "GST_CUDA_BUFFER_POOL": GST_CUDA,
    "GST_CUDA_MEMORY_CAST": GST_CUDA,
    "GST_IS_CUDA_BUFFER_POOL": GST_CUDA,
    "GST_MAP_CUDA": GST_CUDA,
    "GstCudaBufferPool": GST_CUDA,
    "GstCudaContext": GST_CUDA,
    "GstCudaMemory": GST_CUDA,
    # GStreamer 1.24's CUDA streams
    "gst_buffer_pool_config_set_cuda_stream": GST_CUDA_1_24,
    "gst_cuda_memory_get_stream": GST_CUDA_1_24,
    "gst_cuda_memory_sync": GST_CUDA_1_24,
    "gst_cuda_stream_get_handle": GST_CUDA_1_24,
    "gst_cuda_stream_new": GST_CUDA_1_24,
    "gst_cuda_stream_unref": GST_CUDA_1_24,
    "GST_CUDA_MEMORY_TRANSFER_NEED_SYNC": GST_CUDA_1_24,
    "GstCudaStream": GST_CUDA_1_24,
}

# Symbols that no GIR file describes (the helpers behind public macros), with
# why they are in 1.0 already.
NOT_IN_GIR = {
    "_gst_buffer_type": "GST_TYPE_BUFFER (gstbuffer.h, 1.0)",
    "_gst_debug_category_new": "GST_DEBUG_CATEGORY_INIT (gstinfo.h, 1.0)",
    "_gst_debug_min": "GST_CAT_LEVEL_LOG (gstinfo.h, 1.0)",
    "_gst_debug_register_funcptr": "GST_DEBUG_REGISTER_FUNCPTR (gstinfo.h, 1.0)",
    "_gst_element_error_printf": "GST_ELEMENT_ERROR (gstelement.h, 1.0)",
    "_gst_structure_type": "GST_TYPE_STRUCTURE (gststructure.h, 1.0)",
    "_gst_value_array_type": "GST_TYPE_ARRAY (gstvalue.h, 1.0)",
    "_gst_value_list_type": "GST_TYPE_LIST (gstvalue.h, 1.0)",
    "_gst_fraction_type": "GST_TYPE_FRACTION (gstvalue.h, 1.0)",
}

# Namespaces that became public after 1.0: each of their names is at least
# this new, whatever its own annotation says.
NAMESPACE_SINCE = {"GstCuda": "1.22", "CudaGst": "1.22"}

SOURCE_DIRS = ("plugins", "tools", "tests", "bench", "cuda")
SOURCE_SUFFIXES = (".c", ".cpp", ".h", ".cu", ".cuh")
SOURCE_NAME = re.compile(r"\b(?:_?gst_|GST_|Gst)[A-Za-z0-9_]*")

CORE = "{http://www.gtk.org/introspection/core/1.0}"
C_NS = "{http://www.gtk.org/introspection/c/1.0}"
GLIB_NS = "{http://www.gtk.org/introspection/glib/1.0}"
CONTAINERS = {"class", "interface", "record", "union", "enumeration", "bitfield"}
SKIPPED = {"parameters", "return-value", "doc", "doc-deprecated", "source-position", "field",
           "property", "type", "array", "virtual-method", "signal"}


def parse_version(text):
    return tuple(int(p) for p in re.findall(r"\d+", text)) if text else (1, 0)


def gir_index(gir_dir):
    """name -> (version tuple, GIR namespace) for every C name in the GIR files."""
    index = {}

    def add(name, version, namespace):
        if name and (name not in index or version > index[name][0]):
            index[name] = (version, namespace)

    for path in sorted(glob.glob(os.path.join(gir_dir, "*.gir"))):
        base = os.path.basename(path)
        if not (base.startswith("Gst") or base.startswith("CudaGst")):
            continue
        for ns in ET.parse(path).getroot().iter(CORE + "namespace"):
            namespace = ns.get("name")
            floor = parse_version(NAMESPACE_SINCE.get(namespace))

            def walk(el, inherited):
                tag = el.tag.replace(CORE, "")
                own = el.get("version")
                version = max(parse_version(own) if own else inherited, floor)
                add(el.get(C_NS + "identifier"), version, namespace)
                add(el.get(C_NS + "type"), version, namespace)
                add(el.get(GLIB_NS + "get-type"), version, namespace)
                child_base = version if tag in CONTAINERS else inherited
                for child in el:
                    if child.tag.replace(CORE, "").replace(GLIB_NS, "") not in SKIPPED:
                        walk(child, child_base)

            for child in ns:
                walk(child, (1, 0))
    return index


def build_binaries(build):
    with open(os.path.join(build, "meson-info", "intro-targets.json")) as f:
        targets = json.load(f)
    files, missing = [], []
    for target in targets:
        if target["type"] not in ("executable", "shared library", "shared module"):
            continue
        for name in target["filename"]:
            (files if os.path.isfile(name) else missing).append(name)
    return sorted(set(files)), sorted(set(missing))


def undefined_gst_symbols(nm, files):
    """symbol -> the binaries that need it."""
    symbols = {}
    for path in files:
        run = subprocess.run([nm, "-D", "--undefined-only", path], capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"check-gst-api-versions: {nm} failed on {path}: {run.stderr.strip()}")
        for line in run.stdout.split("\n"):
            if not line.strip():
                continue
            name = line.split()[-1].split("@")[0]
            if name.startswith(("gst_", "_gst_")):
                symbols.setdefault(name, []).append(path)
    return symbols


def source_names(root):
    """GStreamer-looking name -> first file:line that writes it."""
    names, files = {}, 0
    for top in SOURCE_DIRS:
        for folder, _, entries in sorted(os.walk(os.path.join(root, top))):
            for entry in sorted(entries):
                if not entry.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(folder, entry)
                files += 1
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        for name in SOURCE_NAME.findall(line):
                            names.setdefault(name, f"{os.path.relpath(path, root)}:{number}")
    return names, files


def show(version):
    return ".".join(str(v) for v in version)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", help="meson build directory")
    parser.add_argument("--gst-min", default="1.20",
                        help="the oldest GStreamer supported: nothing newer may be used unguarded")
    parser.add_argument("--gir-dir", default=os.environ.get("GST_GIR_DIR", "/usr/share/gir-1.0"))
    parser.add_argument("--source-root", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    parser.add_argument("--nm", default=os.environ.get("NM", "nm"))
    parser.add_argument("-v", "--verbose", action="store_true", help="list every name and version")
    args = parser.parse_args()
    limit = parse_version(args.gst_min)

    nm = shutil.which(args.nm)
    if not nm:
        print(f"SKIP: {args.nm} not found")
        return SKIP
    if not os.path.isfile(os.path.join(args.gir_dir, "Gst-1.0.gir")):
        print(f"SKIP: no Gst-1.0.gir in {args.gir_dir} (GStreamer's -dev packages install it)")
        return SKIP
    if not os.path.isfile(os.path.join(args.build, "meson-info", "intro-targets.json")):
        print(f"SKIP: {args.build} is not a configured meson build directory")
        return SKIP

    index = gir_index(args.gir_dir)
    files, not_built = build_binaries(args.build)
    symbols = undefined_gst_symbols(nm, files)
    names, source_files = source_names(args.source_root)

    failures, allowed, newest = [], {}, {}
    def judge(name, kind, found):
        # Above the limit: allowed (with its guard) or a failure; else the
        # newest versions used, for the summary.
        version, namespace = index[name]
        if args.verbose:
            print(f"  {kind} {name}: {show(version)} ({namespace}), {found}")
        if version > limit:
            if name in ALLOWED:
                allowed[name] = version
            else:
                failures.append(f"{name}: GStreamer {show(version)} ({namespace}), {found}")
        else:
            newest.setdefault(version, []).append(name)

    for name in sorted(symbols):
        where = ", ".join(os.path.relpath(p, args.build) for p in symbols[name][:3])
        if len(symbols[name]) > 3:
            where += f" and {len(symbols[name]) - 3} more"
        if name not in index:
            if name not in NOT_IN_GIR:
                failures.append(f"{name}: in no GIR file, version unknown (needed by {where})")
            elif args.verbose:
                print(f"  symbol {name}: not in the GIR files; {NOT_IN_GIR[name]}")
            continue
        judge(name, "symbol", f"needed by {where}")
    for name in sorted(names):
        if name in symbols or name not in index:
            continue
        judge(name, "source", f"written at {names[name]}")

    checked = len([n for n in names if n in index and n not in symbols])
    print(f"GStreamer API against {args.gst_min}: {len(symbols)} undefined gst symbols in "
          f"{len(files)} binaries of {args.build}"
          + (f" ({len(not_built)} targets not built, not checked)" if not_built else "")
          + f", {checked} more GStreamer names in {source_files} source files; "
          f"GIR files of {args.gir_dir}")
    if newest:
        top = max(newest)
        print(f"  newest at or below {args.gst_min}: {show(top)} ({', '.join(sorted(newest[top]))})")
    for reason in sorted(set(ALLOWED[name] for name in allowed)):
        group = sorted(name for name in allowed if ALLOWED[name] == reason)
        print(f"  allowed ({len(group)}, kept out of {args.gst_min} builds by {reason}): "
              + ", ".join(f"{name} {show(allowed[name])}" for name in group))
    if failures:
        print(f"FAIL: {len(failures)} names need a GStreamer newer than {args.gst_min} and no "
              "guard keeps them out of builds against it (add GST_CHECK_VERSION or a meson "
              "option, then list the name in ALLOWED in scripts/check-gst-api-versions.py):")
        for line in failures:
            print("  " + line)
        return 1
    print(f"OK: nothing newer than {args.gst_min} outside the allowed guards")
    return 0


if __name__ == "__main__":
    sys.exit(main())
