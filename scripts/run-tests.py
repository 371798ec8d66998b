#!/usr/bin/env python3
"""Runs the tests of a meson build directory without meson, for a GPU host
where meson is missing or of another version: reads BUILD/meson-info/
intro-tests.json and runs each test's command with its environment, working
directory and timeout. Prints one line per test (OK, FAIL with the end of its
output, SKIP for exit status 77) and a summary; exit status 1 if any failed.

    python3 scripts/run-tests.py BUILD [NAME_FILTER] [--repeat N] [--jobs N]

--jobs N runs up to N tests at once, as `meson test` does (default 1); tests
that meson marks `is_parallel: false` still run alone, after the others.
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time


def option(name, default):
    if name not in sys.argv:
        return default
    value = sys.argv[sys.argv.index(name) + 1]
    sys.argv.remove(name)
    sys.argv.remove(value)
    return int(value)


def run_one(test, repeat, lock, counts):
    name = (test.get("suite") or [""])[0] + ":" + test["name"]
    env = dict(os.environ)
    for key, value in (test.get("env") or {}).items():
        # a test's LD_LIBRARY_PATH goes in front of the runtime's, not instead of it
        if key == "LD_LIBRARY_PATH" and key in os.environ:
            value += ":" + os.environ[key]
        env[key] = value
    cmd = list(test["cmd"])
    # meson records the build machine's interpreter for script tests; on
    # another host use this one when that path does not exist there
    if not os.path.exists(cmd[0]) and os.path.basename(cmd[0]).startswith("python"):
        cmd[0] = sys.executable
    for _ in range(repeat):
        start = time.time()
        try:
            run = subprocess.run(cmd, cwd=test.get("workdir") or None, env=env,
                                 capture_output=True, text=True,
                                 timeout=test.get("timeout") or 300)
            code, output = run.returncode, run.stdout + run.stderr
        except subprocess.TimeoutExpired as e:
            code, output = None, "TIMEOUT\n" + (e.stdout or b"").decode(errors="replace")
        if code == 77:
            state = "SKIP"
        elif code is not None and (code == 0) != bool(test.get("should_fail")):
            state = "OK"
        else:
            state = "FAIL"
        with lock:
            counts[state] += 1
            print(f"{state:4} {time.time() - start:7.2f}s {name}", flush=True)
            if state == "FAIL":
                print("\n".join("    " + line for line in output.splitlines()[-60:]), flush=True)


def main():
    repeat = option("--repeat", 1)
    jobs = max(1, option("--jobs", 1))
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not args:
        sys.exit(__doc__)
    build, name_filter = args[0], args[1] if len(args) > 1 else ""
    with open(os.path.join(build, "meson-info", "intro-tests.json")) as f:
        tests = json.load(f)
    chosen = [t for t in tests
              if name_filter in (t.get("suite") or [""])[0] + ":" + t["name"]]
    counts = {"OK": 0, "FAIL": 0, "SKIP": 0}
    lock = threading.Lock()
    # the long tests first, by meson's priority, so that they do not end last
    together = sorted((t for t in chosen if t.get("is_parallel", True)),
                      key=lambda t: -(t.get("priority") or 0))
    alone = [t for t in chosen if not t.get("is_parallel", True)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for future in [pool.submit(run_one, t, repeat, lock, counts) for t in together]:
            future.result()
    for test in alone:
        run_one(test, repeat, lock, counts)
    print(f"{counts['OK']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")
    sys.exit(1 if counts["FAIL"] else 0)


main()
