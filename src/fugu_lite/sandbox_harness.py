"""The script the sandbox runs in its subprocess (standard library only): it sets the
limits, installs the audit hook, runs the code and then the tests, and reports each step
to results.jsonl (read back by sandbox_results.py)."""

# The harness runs inside the sandbox, standard library only. It reports through
# results.jsonl: "ready" (limits set, about to run the code), "start" before each test or
# set-up statement (where a run that never ends was), one "test" per test, "load_error"
# when the code itself does not run, and "done".
HARNESS = r'''
import _socket, ast, builtins, io, json, os, posix, resource, signal, sys, threading, time
import traceback
import urllib.parse

folder, settings = sys.argv[1], json.loads(sys.argv[2])
workdir = os.path.realpath(os.path.join(folder, "work"))
results = open(os.path.join(folder, "results.jsonl"), "w", encoding="utf-8")
solution_code = open(os.path.join(folder, "solution.py"), encoding="utf-8").read()
tests_code = open(os.path.join(folder, "tests.py"), encoding="utf-8").read()
tests_tree = ast.parse(tests_code)


def holds_assert(node):
    """Whether a top-level statement is a test: an assert, or a loop, `with` or `try` holding
    one (`for a, b in CASES: assert ...`), not one inside a function or class it defines.
    Mirrors tasks.count_tests."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
        return False
    return isinstance(node, ast.Assert) or any(map(holds_assert, ast.iter_child_nodes(node)))


test_functions = [
    node.name for node in tests_tree.body
    if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
]
total = sum(map(holds_assert, tests_tree.body)) + len(test_functions)
# the names the tests call (`add(1, 2)`), not those they only use (`math.isclose`, `MAX`)
called_by_tests = {
    node.func.id for node in ast.walk(tests_tree)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
}


def emit(**event):
    results.write(json.dumps(event) + "\n")
    results.flush()


STDIN_HINT = (
    " (the code reads standard input, which is empty when graded: the tests call"
    " its functions, so input belongs under `if __name__ == \"__main__\":`)"
)


def short_error(error):
    lines = traceback.format_exception_only(type(error), error)
    text = "".join(lines).strip()[-800:]
    if isinstance(error, EOFError):  # input() with nothing to read
        text += STDIN_HINT
    # "not authorized" (ATTACH) or "authorization denied" (VACUUM INTO)
    if sqlite_refusals and isinstance(error, _sqlite3.DatabaseError) and "authoriz" in text:
        text += " (" + sqlite_refusals[-1] + ")"
    if isinstance(error, ModuleNotFoundError):  # python -I -S: no site-packages
        text += (
            " (the sandbox runs the standard library only: installed packages such as"
            " numpy are not importable there)"
        )
    if isinstance(error, NameError) and getattr(error, "name", None) and raised_in_tests(error):
        if error.name in failed_setup:  # the tests' own set-up line that sets it failed
            text += " (" + failed_setup[error.name] + ")"
        elif error.name in called_by_tests:
            text += " (" + defined_functions_hint(error.name) + ")"
        else:  # a module the code imported for them (`from math import isclose`), a constant
            text += (
                f" (the tests use {error.name}, which neither they nor the code define or"
                " import)"
            )
    return text


# what the tests' set-up lines that raised would have set: the name, then why it is missing
failed_setup = {}


def names_set(node):
    """The names a set-up statement sets (`result = add(1, 2)`, `import math as m`)."""
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in n.names)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
    return names


def raised_in_tests(error):
    """Whether the tests' own line raised `error` (a NameError in the code is its own typo)."""
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return frame is not None and frame.tb_frame.f_code.co_filename == "tests.py"


def defined_functions_hint(missing):
    """The code's own functions, for tests that call one it does not define (another name)."""
    names = sorted(
        name for name, value in namespace.items()
        if callable(value) and getattr(value, "__module__", None) == "solution"
    )
    if not names:
        return f"the code defines no function; the tests call {missing}()"
    return f"the code defines {', '.join(name + '()' for name in names)}, not {missing}()"


def exit_with_parent(parent, getppid=os.getppid, sleep=time.sleep, exit_now=os._exit):
    """A killed grading process must not leave this one behind: an answer that sleeps never
    reaches its CPU limit. (The functions are its own: code may replace time.sleep.)"""
    while getppid() == parent:
        sleep(0.5)
    exit_now(1)


threading.Thread(target=exit_with_parent, args=(settings["parent_pid"],), daemon=True).start()


def limit(name, value):
    try:
        resource.setrlimit(getattr(resource, name), (value, value))
    except (ValueError, OSError, AttributeError):
        pass  # e.g. a lower hard limit already in place


memory = settings["memory_bytes"]
limit("RLIMIT_AS", memory)
limit("RLIMIT_DATA", memory)
try:
    resource.setrlimit(resource.RLIMIT_CPU, (settings["cpu_s"], settings["cpu_s"] + 1))
except (ValueError, OSError):
    limit("RLIMIT_CPU", settings["cpu_s"])
limit("RLIMIT_FSIZE", settings["output_bytes"] + 1_000_000)
limit("RLIMIT_CORE", 0)
limit("RLIMIT_NPROC", settings["max_processes"])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


class CappedBytes(io.RawIOBase):
    """Writes to a file descriptor until the cap (in bytes), then drops the rest silently."""

    def __init__(self, fd, cap):
        self.fd, self.left = fd, cap

    def writable(self):
        return True

    def fileno(self):
        return self.fd

    def write(self, data):
        part = bytes(data[: max(self.left, 0)])
        self.left -= len(part)
        try:
            while part:
                part = part[os.write(self.fd, part):]
        except OSError:
            self.left = 0
        return len(data)


def capped_stream(fd, cap):
    """A text stream like sys.stdout (with .buffer, .encoding, .reconfigure), capped, and
    written through at once: a killed run keeps what it printed."""
    return io.TextIOWrapper(
        CappedBytes(fd, cap), encoding="utf-8", errors="backslashreplace", write_through=True
    )


# kept referenced, as sys.__stdout__ keeps Python's: a wrapper the code builds on
# sys.stdout.buffer must not see it closed when the code replaces sys.stdout
capped_streams = tuple(capped_stream(fd, settings["output_bytes"]) for fd in (1, 2))
sys.stdout, sys.stderr = capped_streams

BLOCKED = {
    "socket.connect", "socket.bind", "socket.getaddrinfo",
    "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr",
    "socket.sendto", "socket.sendmsg", "os.system", "os.fork", "os.forkpty",
    "os.posix_spawn", "os.spawn", "os.exec", "subprocess.Popen", "os.kill", "os.killpg",
    "signal.pthread_kill", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
    "resource.prlimit", "os.setuid", "os.setgid", "os.setsid",
    "os.chroot", "pty.spawn",
}
BLOCKED_IMPORTS = {"ctypes", "_ctypes", "cffi", "_multiprocessing"}
# each event's paths, as (where the path is, where its dir_fd is) in the event's arguments
PATH_EVENTS = {
    "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.rename": ((0, 2), (1, 3)),
    "os.mkdir": ((0, 2),), "os.chmod": ((0, 2),), "os.chown": ((0, 3),),
    "os.truncate": ((0, None),), "os.link": ((0, 2), (1, 3)), "os.symlink": ((1, 2),),
    "os.utime": ((0, 3),), "shutil.rmtree": ((0, 1),),
    "shutil.move": ((0, None), (1, None)), "shutil.copyfile": ((1, None),),
    "os.chflags": ((0, None),), "os.setxattr": ((0, None),), "os.removexattr": ((0, None),),
}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class SandboxViolation(PermissionError):
    pass


def opened_at(fd):
    """The path a descriptor is open on (a dir_fd's folder), None for none: os events give -1,
    and a dir_fd open on no folder (AT_FDCWD, -100, is the working directory) makes the call
    fail."""
    if fd is None:
        return None
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def resolved(path, dir_fd=None):
    """The path a call means: a relative one given with dir_fd is in that folder, not in the
    working one (os.open('x', flags, dir_fd=os.open('/tmp', os.O_RDONLY)) is /tmp/x); join
    keeps an absolute one as it is."""
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = path.decode("utf-8", "replace")
    folder = opened_at(dir_fd)
    return path if folder is None else os.path.join(folder, path)


def inside(path, dir_fd=None):
    if isinstance(path, int):
        return True
    real = os.path.realpath(resolved(path, dir_fd))
    return real == workdir or real.startswith(workdir + os.sep) or real == os.devnull


def described(path, dir_fd):
    """A path as a refusal names it: with the dir_fd folder it is relative to, if any."""
    folder = opened_at(dir_fd)
    return repr(path) if folder is None else f"{path!r} in {folder!r} (its dir_fd)"


def sqlite_file(database):
    """The file sqlite3.connect(database) opens, None for a database in memory; a `file:`
    name is read as the URI it is with uri=True (its path, without its ?query)."""
    name = os.fsdecode(database)
    if name.startswith("file:"):
        name = urllib.parse.unquote(urllib.parse.urlsplit(name).path)
    return None if name in ("", ":memory:") else name


def refuse(what):
    raise SandboxViolation(f"fugu-lite sandbox: {what} is not allowed")


# SQLite's own action codes (sqlite3.h): VACUUM INTO is authorized as an ATTACH of its file
SQLITE_OK, SQLITE_DENY, SQLITE_ATTACH = 0, 1, 24
# what the authorizer denied: SQLite's error does not say, short_error adds it
sqlite_refusals = []


def attach_inside(action, name, *rest):
    """A connection's authorizer: ATTACH and VACUUM INTO open the file they name with no
    audit event, so one outside the working folder is denied."""
    path = sqlite_file(name) if action == SQLITE_ATTACH and name is not None else None
    if path is not None and not inside(path):
        sqlite_refusals.append(
            f"fugu-lite sandbox: ATTACH or VACUUM INTO {name!r} outside the working folder"
            " is not allowed"
        )
        return SQLITE_DENY
    return SQLITE_OK


def raises_hard_limit(which, limits):
    """Whether setrlimit(which, limits) would raise a hard limit (what the code may not do,
    and root may); a soft limit up to its hard one, `RLIMIT_STACK` for deep recursion, may."""
    try:
        current = resource.getrlimit(which)[1]
        wanted = limits[1]
    except (ValueError, TypeError, IndexError, OSError):
        return False  # setrlimit itself raises the error
    if current == resource.RLIM_INFINITY:
        return False
    return wanted == resource.RLIM_INFINITY or wanted < 0 or wanted > current


def hook(event, args):
    if event in BLOCKED:
        refuse(event)
    # an event loop wakes itself through a socketpair() (AF_UNIX, neither bound nor
    # connected); connecting or binding any socket stays refused
    if event == "socket.__new__" and args[1] != _socket.AF_UNIX:
        refuse(event)
    if event == "resource.setrlimit" and raises_hard_limit(*args):
        refuse("raising a hard resource limit")
    if event == "import" and args[0].split(".")[0] in BLOCKED_IMPORTS:
        refuse(f"importing {args[0]}")
    if event == "open":
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(
            (flags or 0) & WRITE_FLAGS
        )
        if writes and path is not None and not inside(path):
            refuse(f"writing {path!r} (only the working folder is writable)")
    # SQLite opens its files itself: no "open" event, only this one
    if event == "sqlite3.connect":
        path = sqlite_file(args[0])
        if path is not None and not inside(path):
            refuse(f"sqlite3.connect to {args[0]!r} outside the working folder")
    if event in PATH_EVENTS:
        for index, dir_fd_index in PATH_EVENTS[event]:
            path = args[index] if index < len(args) else None
            if isinstance(path, int):  # os.chmod(fd): an fd opened read-only may be anywhere
                path = opened_at(path)
            if path is None:
                continue
            dir_fd = args[dir_fd_index] if dir_fd_index is not None else None
            if not inside(path, dir_fd):
                refuse(f"{event} on {described(path, dir_fd)} outside the working folder")


for name in list(sys.modules):
    if name.split(".")[0] in BLOCKED_IMPORTS:
        del sys.modules[name]


def no_fork_exec(*args, **kwargs):
    refuse("starting a process")


# `import subprocess` (or asyncio, which imports it) must work; starting a process must not.
# fork_exec raises no audit event of its own, so the module keeps a refusing stand-in.
import _posixsubprocess  # noqa: E402

_posixsubprocess.fork_exec = no_fork_exec


def checked_first(make):
    """os.mkfifo and os.mknod raise no audit event: a stand-in checks where they make a file."""

    def make_inside(path, *args, dir_fd=None, **kwargs):
        if not inside(path, dir_fd):
            refuse(f"os.{make.__name__} on {described(path, dir_fd)} outside the working folder")
        return make(path, *args, dir_fd=dir_fd, **kwargs)

    return make_inside


def open_checked(path, flags, *args, dir_fd=None, open_fd=os.open, **kwargs):
    """os.open's "open" event leaves its dir_fd out: a name relative to a folder outside is
    checked here, the rest by the hook."""
    if flags & WRITE_FLAGS and not inside(path, dir_fd):
        refuse(f"os.open writing {described(path, dir_fd)} outside the working folder")
    return open_fd(path, flags, *args, dir_fd=dir_fd, **kwargs)


def stand_in(name, replacement):
    """os.<name> becomes `replacement`, and so does posix.<name>, which os takes it from
    (`import posix` reached the real one); os.supports_dir_fd lists it as it did the real one
    (shutil.rmtree removes through dir_fd only when it lists os.open)."""
    if getattr(os, name) in os.supports_dir_fd:
        os.supports_dir_fd.add(replacement)
    setattr(os, name, replacement)
    setattr(posix, name, replacement)


stand_in("mkfifo", checked_first(os.mkfifo))
stand_in("mknod", checked_first(os.mknod))
stand_in("open", open_checked)


# The "sqlite3.connect/handle" event comes before a connection may take an authorizer: the
# names sqlite3 takes from _sqlite3 at its import give each connection one instead.
try:
    import _sqlite3  # noqa: E402
except ImportError:  # a Python built without SQLite: no connection to authorize
    _sqlite3 = None

if _sqlite3 is not None:

    class AuthorizedConnection(_sqlite3.Connection):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.set_authorizer(attach_inside)

    def connect_authorized(*args, connect=_sqlite3.connect, **kwargs):
        if len(args) < 6:  # the factory, sixth, not given by position
            kwargs.setdefault("factory", AuthorizedConnection)
        connection = connect(*args, **kwargs)
        connection.set_authorizer(attach_inside)
        return connection

    _sqlite3.Connection, _sqlite3.connect = AuthorizedConnection, connect_authorized
sys.addaudithook(hook)
emit(event="ready", total=total)



def exit_as_site_does(code=None):
    """exit() and quit(): `site` defines them, and `python -S` skips it (a call raised
    NameError, as if the code had a typo, not the SystemExit it means)."""
    raise SystemExit(code)


builtins.exit = builtins.quit = exit_as_site_does


def reads_stdin(code):
    """Whether the code reads standard input: sys.stdin, input(), open(0)."""
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Attribute) and node.attr == "stdin":
            return True
        if isinstance(node, ast.Name) and node.id == "stdin":
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "input":
                return True
            first = node.args[0] if node.args else None
            if node.func.id == "open" and isinstance(first, ast.Constant) and first.value == 0:
                return True
    return False


def without_own_asserts(code):
    """The code compiled without its top-level asserts, loops holding one (`for args,
    expected in cases: assert ...`), calls of its own test functions (`test_add()`) and of
    unittest.main(), also inside a top-level if, try or with: the model's own checks, and one
    it got wrong (`assert add(2, 2) == 5`) would fail every test of functions that may be
    right. The task's tests judge those."""
    tree = ast.parse(code, "solution.py")
    own_tests = {
        node.name for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
        and any(isinstance(inner, ast.Assert) for inner in ast.walk(node))
    }
    runners = unittest_main_names(tree)
    tree.body = without_own_checks(tree.body, own_tests, runners)
    return compile(tree, "solution.py", "exec")


def without_own_checks(body, own_tests, runners):
    """`body` without its own checks, also those inside its if, try and with statements
    (`try: assert add(2, 2) == 5` then `finally:`, `if RUN: unittest.main()` run at load as
    bare ones do), whose other statements stay; a block left empty holds a `pass`."""
    kept = []
    for node in body:
        if is_own_check(node, own_tests, runners):
            continue
        for block, field in blocks_inside(node):
            statements = getattr(block, field)
            inner = without_own_checks(statements, own_tests, runners)
            setattr(block, field, inner or [ast.copy_location(ast.Pass(), statements[0])])
        kept.append(node)
    return kept


def blocks_inside(node):
    """Each (statement, field) block of an if, try or with statement that runs at load: its
    body, else, finally and except blocks (none for a function, class or loop)."""
    if isinstance(node, (ast.If, ast.Try, ast.TryStar, ast.With)):
        for block in (node, *getattr(node, "handlers", [])):
            for field in ("body", "orelse", "finalbody"):
                if getattr(block, field, []):
                    yield block, field


def unittest_main_names(tree):
    """The names the code's imports give unittest.main (`unittest.main`, `ut.main`, `main`).
    Called outside a main guard, it runs the TestCases of __main__, the harness's module
    (none), then exits: a right function failed every test."""
    names = set()
    for node in run_at_load(tree.body):
        if isinstance(node, ast.Import):
            names.update(
                (alias.asname or alias.name) + ".main"
                for alias in node.names if alias.name == "unittest"
            )
        elif isinstance(node, ast.ImportFrom) and node.module == "unittest":
            names.update(alias.asname or alias.name for alias in node.names if alias.name == "main")
    return names


def run_at_load(body):
    """The statements of `body` and those inside its if, try and with statements, not those
    of the functions and classes it defines."""
    for node in body:
        yield node
        for block, field in blocks_inside(node):
            yield from run_at_load(getattr(block, field))


def is_own_check(node, own_tests, runners):
    """An assert, a loop holding one, a call of one of `own_tests` with no arguments, or a
    call of one of `runners` (unittest.main)."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        call = node.value
        if ast.unparse(call.func) in runners:
            return True
        return isinstance(call.func, ast.Name) and call.func.id in own_tests and not call.args
    return isinstance(node, ast.Assert) or (
        isinstance(node, (ast.For, ast.While)) and holds_assert(node)
    )


module = type(sys)("solution")
module.__file__ = os.path.join(folder, "solution.py")  # as a script has it
sys.argv = [module.__file__]  # not the harness's: a script run with no arguments
sys.modules["solution"] = module
namespace = module.__dict__
try:
    exec(without_own_asserts(solution_code), namespace)
except BaseException as error:  # the model's code failed: every test fails
    why = short_error(error)
    if isinstance(error, (IndexError, ValueError, StopIteration)) and reads_stdin(solution_code):
        why += STDIN_HINT  # sys.stdin.read() gave "": data[0] or int("") failed
    emit(event="load_error", error="the code raised " + why)
    for node in tests_tree.body:
        if holds_assert(node):
            emit(event="test", name=f"line {node.lineno}", passed=False, error="not run")
    for name in test_functions:
        emit(event="test", name=name, passed=False, error="not run")
    emit(event="done")
    results.close()
    os._exit(0)


def failed_import_of_the_tests(node, error):
    """Whether a set-up statement that raised `error` is an import the tests cannot do here
    (a package, a blocked module): the task's fault, whatever the code. `from solution import
    f` failing is the code's (it named f otherwise)."""
    if not isinstance(node, (ast.Import, ast.ImportFrom)):
        return False
    if isinstance(error, SandboxViolation):
        return True
    return isinstance(error, ImportError) and (error.name or "").split(".")[0] != "solution"


def run(name, action):
    emit(event="start", where=f"the test {name}")
    try:
        action()
    except BaseException as error:
        own_import = (
            isinstance(error, ImportError)
            and (error.name or "").split(".")[0] != "solution"
            and raised_in_tests(error)
        )
        emit(
            event="test", name=name, passed=False, error=short_error(error),
            tests_import=own_import,
        )
    else:
        emit(event="test", name=name, passed=True)


for node in tests_tree.body:
    code = compile(ast.Module(body=[node], type_ignores=[]), "tests.py", "exec")
    if holds_assert(node):
        source = ast.get_source_segment(tests_code, node) or ""
        if not isinstance(node, ast.Assert):  # a loop: its first line
            source = source.split("\n")[0]
        run(f"line {node.lineno}: {source[:120]}", lambda code=code: exec(code, namespace))
    else:
        emit(event="start", where=f"the tests' set-up line {node.lineno}")
        try:
            exec(code, namespace)
        except BaseException as error:
            why = short_error(error)
            emit(
                event="setup_error", line=node.lineno, error=why,
                tests_import=failed_import_of_the_tests(node, error),
            )
            for missing in names_set(node):
                failed_setup[missing] = (
                    f"the tests' set-up line {node.lineno}, which sets it, raised {why}"
                )
for name in test_functions:
    if name not in namespace and name in failed_setup:  # its def line raised (a default)
        error = f"name {name!r} is not defined ({failed_setup[name]})"
        emit(event="test", name=name, passed=False, error=error)
        continue
    run(name, lambda name=name: namespace[name]())
emit(event="done")
results.close()
sys.stdout.flush()
os._exit(0)
'''
