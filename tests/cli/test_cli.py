from procs import run_python


def test_help_does_not_import_torch():
    code = (
        "import sys\n"
        "from actlab.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0\n"
        "heavy = [m for m in ('torch', 'mujoco', 'av', 'pyarrow', 'matplotlib') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = run_python(code, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "actlab" in out.stdout


def test_every_subcommand_help_is_light():
    from actlab.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name in sub.choices:
        code = (
            "import sys\nfrom actlab.cli import main\n"
            f"try:\n    main([{name!r}, '--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules\n"
        )
        out = run_python(code, timeout=60)
        assert out.returncode == 0, (name, out.stderr)


def _all_parsers(parser, path=("actlab",)):
    yield path, parser
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, child in action.choices.items():
                yield from _all_parsers(child, (*path, name))


def test_no_help_shows_an_escaped_percent_sign():
    # argparse %-formats argument and subcommand help, not descriptions or epilogs: a "%%" written in a
    # description reaches the user as is (it did in `actlab monitor --help`).
    from actlab.cli import build_parser

    shown = {" ".join(path): p.format_help() for path, p in _all_parsers(build_parser())}
    assert len(shown) > 20
    assert [cmd for cmd, text in shown.items() if "%%" in text] == []


def test_eval_video_pick_choices_are_the_harness_s():
    # The CLI lists them itself (it must not import the evaluation harness to build its parser).
    from actlab.cli import build_parser
    from actlab.evaluation.harness import VIDEO_PICKS

    evaluate = dict(_all_parsers(build_parser()))[("actlab", "eval")]
    pick = next(a for a in evaluate._actions if a.dest == "video_pick")
    assert tuple(pick.choices) == VIDEO_PICKS and pick.default == VIDEO_PICKS[0]


def test_eval_default_seed_is_the_harness_s():
    # Written out in the parser for the same reason; it must stay the held-out default.
    from actlab.cli import build_parser
    from actlab.evaluation.seeds import DEFAULT_SEED

    parsers = dict(_all_parsers(build_parser()))
    for command in (("actlab", "eval"), ("actlab", "bench", "eval")):
        seed = next(a for a in parsers[command]._actions if a.dest == "seed")
        assert seed.default == DEFAULT_SEED, command


def test_every_option_has_help_that_names_its_default():
    # `data synth --help` and `bench data --help` listed options with neither help nor default.
    import argparse

    from actlab.cli import build_parser

    def walk(p, path):
        yield path, p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    yield from walk(sp, f"{path} {name}")

    skip = (
        argparse._HelpAction,
        argparse._SubParsersAction,
        argparse._VersionAction,
        argparse._StoreConstAction,
    )
    bad = []
    for path, p in walk(build_parser(), "actlab"):
        for a in p._actions:
            if isinstance(a, skip) or not a.option_strings:
                continue
            d, text = a.default, a.help or ""
            shown = {str(d), f"{d:g}" if isinstance(d, float) else str(d)}
            if isinstance(d, (list, tuple)):
                shown |= {" ".join(map(str, d)), ",".join(map(str, d))}
            if not text or (
                d not in (None, False, [], argparse.SUPPRESS) and not any(s in text for s in shown)
            ):
                bad.append(f"{path} {a.option_strings[0]}: {text or 'no help'} (default {d!r})")
    assert bad == []
