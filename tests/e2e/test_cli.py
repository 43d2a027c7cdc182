"""The CLI skeleton: version, help, doctor, and usage errors."""
import re


def test_version_prints_semver_and_build_flags(sg):
    r = sg("--version")
    assert r.returncode == 0
    assert re.fullmatch(r"saragossa \d+\.\d+\.\d+ \(CUDA=[01] SAN=[01] NATIVE=[01] DEBUG=[01] CC=\S+\)\n", r.stdout)
    assert sg("version").stdout == r.stdout


def test_help_lists_every_verb(sg):
    r = sg("help")
    assert r.returncode == 0
    for verb in ("help", "version", "doctor"):
        assert re.search(rf"^  {verb}\s+\S", r.stdout, re.M), verb
    one = sg("help", "doctor")
    assert one.returncode == 0 and one.stdout.startswith("usage: saragossa doctor")


def test_unknown_verb_is_usage_error(sg):
    r = sg("frobnicate")
    assert r.returncode == 2
    assert r.stderr.splitlines()[0] == "saragossa: unknown verb 'frobnicate'"
    assert "usage:" in r.stderr
    assert r.stdout == ""


def test_unknown_option_is_usage_error(sg):
    for args in (["--bogus"], ["doctor", "--bogus"], ["version", "x"], ["help", "nope"]):
        r = sg(*args)
        assert r.returncode == 2, args
        assert r.stderr.startswith("saragossa: "), args
        assert "usage: saragossa" in r.stderr, args


def test_no_arguments_prints_help_and_fails(sg):
    r = sg()
    assert r.returncode == 2
    assert "verbs:" in r.stderr


def test_doctor_reports_machine_and_every_flag(sg):
    r = sg("doctor")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for field in ("build:", "cpu:", "cores:", "simd:", "memory:", "cuda:", "flags:"):
        assert re.search(rf"^{field}", out, re.M), field
    cores = int(re.search(r"^cores:\s+(\d+)", out, re.M).group(1))
    assert cores >= 1
    flags = re.findall(r"^  (SARAGOSSA_\w+|RETI_\w+)\s+= ", out, re.M)
    assert "SARAGOSSA_LOG" in flags and "SARAGOSSA_THREADS" in flags and "SARAGOSSA_SIMD" in flags
    assert len(flags) == len(set(flags))


def test_doctor_shows_environment_values(sg):
    r = sg("doctor", env={"SARAGOSSA_THREADS": "7", "SARAGOSSA_LOG": "debug"})
    assert re.search(r"^  SARAGOSSA_THREADS\s+= 7\s+\(env\)", r.stdout, re.M)
    assert re.search(r"^  SARAGOSSA_LOG\s+= debug\s+\(env\)", r.stdout, re.M)
    bad = sg("doctor", env={"SARAGOSSA_THREADS": "lots"})
    assert bad.returncode == 0
    assert "SARAGOSSA_THREADS='lots' is not a valid integer" in bad.stderr
    assert re.search(r"^  SARAGOSSA_THREADS\s+= 0\s+\(env\)", bad.stdout, re.M)


def test_doctor_never_prints_the_api_key(sg):
    r = sg("doctor", env={"SARAGOSSA_API_KEY": "hunter2-secret"})
    assert r.returncode == 0
    assert "hunter2-secret" not in r.stdout + r.stderr
    assert re.search(r"^  SARAGOSSA_API_KEY\s+= \(set, hidden\)", r.stdout, re.M)
