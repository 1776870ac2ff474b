"""The locale catalogs: complete, well-formed, and their unit labels mean units.

Every check is a small function that returns a list of problems, so the same
function runs against the shipped files (must find nothing) and against
deliberately broken copies (must find something): the checks are shown to
have teeth in `TestChecksCatchMutations`.

Unit labels
-----------
A unit key is every key ending in `.ms` or `.unit`. The unit it stands for is
read from en-US (`ms` -> milliseconds, `s` -> seconds). In each locale the
label must be one of the forms listed for that language in `MS_UNITS` /
`S_UNITS`, and it must contain no honorific from `HONORIFICS` (the known
failure: `nodes.common.retry.ms` rendered as "Ms./Mrs." in nine locales).

Casing
------
Casing is checked in two layers:

1. The allow-list comparison is exact and case-sensitive: the listed form *is*
   the expected casing for that language (uk-UA `мс` lower-case, de-DE `ms`,
   but the German noun `Millisekunden` capitalised as German nouns are).
2. Independently of the lists, a unit *symbol* (`ms`, `s`, `мс`, `с`, in any
   letter case) must be written lower-case: SI symbols for milli- and second
   are lower-case in every language, and a capitalised `Ms` is exactly what the
   honorific mistranslation looks like. Full words are covered by layer 1.
"""

from __future__ import annotations

import codecs
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest
from firstgate.locales import DEFAULT_LOCALE, normalize_locale, t

from firstgate import locales

LOCALES_DIR = Path(locales.__file__).resolve().parent

EXPECTED_LOCALES: frozenset[str] = frozenset(
    {
        "en-US",
        "zh-Hans",
        "zh-Hant",
        "pt-BR",
        "es-ES",
        "fr-FR",
        "de-DE",
        "ja-JP",
        "ko-KR",
        "ru-RU",
        "it-IT",
        "th-TH",
        "uk-UA",
        "vi-VN",
        "ro-RO",
        "pl-PL",
        "hi-IN",
        "tr-TR",
        "fa-IR",
        "sl-SI",
        "id-ID",
        "nl-NL",
        "ar-TN",
    }
)
NON_ENGLISH = sorted(EXPECTED_LOCALES - {DEFAULT_LOCALE})

PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")
# Anything brace-like that is not a well-formed `{{name}}`: `{name}`, `{{ name`, `{{}}`.
STRAY_BRACES = re.compile(r"\{|\}")

UNIT_KEY_SUFFIXES = (".ms", ".unit")

# Accepted labels per locale, compared exactly (case-sensitive, NFC).
MS_UNITS: dict[str, frozenset[str]] = {
    "en-US": frozenset({"ms", "milliseconds"}),
    "zh-Hans": frozenset({"毫秒"}),
    "zh-Hant": frozenset({"毫秒"}),
    "pt-BR": frozenset({"ms", "milissegundos"}),
    "es-ES": frozenset({"ms", "milisegundos"}),
    "fr-FR": frozenset({"ms", "millisecondes"}),
    "de-DE": frozenset({"ms", "Millisekunden"}),
    "ja-JP": frozenset({"ミリ秒", "ms"}),
    "ko-KR": frozenset({"밀리초", "ms"}),
    "ru-RU": frozenset({"мс", "миллисекунд"}),
    "it-IT": frozenset({"ms", "millisecondi"}),
    "th-TH": frozenset({"มิลลิวินาที", "ms"}),
    "uk-UA": frozenset({"мс", "мілісекунд"}),
    "vi-VN": frozenset({"ms", "mili giây"}),
    "ro-RO": frozenset({"ms", "milisecunde"}),
    "pl-PL": frozenset({"ms", "milisekundy", "milisekund"}),
    "hi-IN": frozenset({"मिलीसेकंड", "ms"}),
    "tr-TR": frozenset({"ms", "milisaniye", "msn"}),
    "fa-IR": frozenset({"میلی\u200cثانیه", "ms"}),
    "sl-SI": frozenset({"ms", "milisekund", "milisekunde"}),
    "id-ID": frozenset({"ms", "milidetik"}),
    "nl-NL": frozenset({"ms", "milliseconden"}),
    "ar-TN": frozenset({"مللي ثانية", "ملي ثانية", "ميلي ثانية", "ms"}),
}
S_UNITS: dict[str, frozenset[str]] = {
    "en-US": frozenset({"s", "seconds"}),
    "zh-Hans": frozenset({"秒"}),
    "zh-Hant": frozenset({"秒"}),
    "pt-BR": frozenset({"s", "segundos"}),
    "es-ES": frozenset({"s", "segundos"}),
    "fr-FR": frozenset({"s", "secondes"}),
    "de-DE": frozenset({"s", "Sekunden"}),
    "ja-JP": frozenset({"秒"}),
    "ko-KR": frozenset({"초"}),
    "ru-RU": frozenset({"с", "секунд"}),
    "it-IT": frozenset({"s", "secondi"}),
    "th-TH": frozenset({"วินาที"}),
    "uk-UA": frozenset({"с", "секунд"}),
    "vi-VN": frozenset({"s", "giây"}),
    "ro-RO": frozenset({"s", "secunde"}),
    "pl-PL": frozenset({"s", "sekundy", "sekund"}),
    "hi-IN": frozenset({"सेकंड", "s"}),
    "tr-TR": frozenset({"s", "sn", "saniye"}),
    "fa-IR": frozenset({"ثانیه"}),
    "sl-SI": frozenset({"s", "sekund", "sekunde"}),
    "id-ID": frozenset({"s", "detik"}),
    "nl-NL": frozenset({"s", "seconden"}),
    "ar-TN": frozenset({"ثانية", "ث"}),
}
UNIT_KINDS: dict[str, dict[str, frozenset[str]]] = {"ms": MS_UNITS, "s": S_UNITS}

# Unit symbols in cased scripts; in any letter case they must be written lower-case.
UNIT_SYMBOLS = frozenset({"ms", "s", "msn", "sn", "мс", "с"})

# Honorifics and forms of address that have been (or could be) mistaken for a
# unit. Matched case-insensitively; whole-word for alphabetic scripts that
# separate words with spaces, as a substring for Han, Kana, Hangul, Thai,
# Devanagari and Arabic-script terms. A bare "Ms"/"MS" is caught by the
# casing rule rather than here, since "ms" itself is the correct label.
HONORIFICS: tuple[str, ...] = (
    # English
    "Ms.", "Mrs", "Mrs.", "Mr", "Mr.", "Miss", "Madam",
    # German, Dutch
    "Frau", "Fr.", "Herr", "Hr.", "Mevrouw", "Mevr.", "Meneer", "Dhr.",
    # Romance
    "Sra", "Sra.", "Sr", "Sr.", "Srta.", "Señora", "Señor", "Senhora", "Senhor",
    "Signora", "Signor", "Sig.ra", "Madame", "Mme", "Mlle", "Monsieur",
    "Doamna", "Doamnă", "Dna.", "Domnul",
    # Slavic (Latin script)
    "Pani", "Pan", "Gospa", "Gospod", "Ga.",
    # Turkish, Indonesian, Vietnamese
    "Bayan", "Bay", "Hanım", "Hanim", "Sayın", "Nyonya", "Ibu", "Bà", "Ông", "Cô",
    # Cyrillic
    "Госпожа", "Господин", "Г-жа", "Пані", "Пан", "Мадам",
    # Han, Kana, Hangul
    "夫人", "女士", "小姐", "先生", "様", "さん", "씨", "님", "부인", "여사",
    # Thai, Devanagari
    "นาง", "นางสาว", "คุณ", "श्रीमती", "सुश्री", "श्री",
    # Arabic, Persian
    "خانم", "بانو", "آقا", "السيدة", "سيدة", "السيد", "مدام",
)  # fmt: skip

_SPACED_SCRIPTS = ("LATIN", "CYRILLIC")


def _is_spaced_script(term: str) -> bool:
    letters = [c for c in term if c.isalpha()]
    return bool(letters) and all(
        unicodedata.name(c, "").startswith(_SPACED_SCRIPTS) for c in letters
    )


def honorifics_in(value: str) -> list[str]:
    folded = unicodedata.normalize("NFC", value).casefold()
    found: list[str] = []
    for term in HONORIFICS:
        needle = term.casefold()
        if _is_spaced_script(term):
            if re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", folded):
                found.append(term)
        elif needle in folded:
            found.append(term)
    return found


# --------------------------------------------------------------------------- loading


def read_bytes(locale: str) -> bytes:
    return (LOCALES_DIR / f"{locale}.json").read_bytes()


def parse_catalog(raw: bytes) -> dict[str, str]:
    """Decode strictly: UTF-8, no BOM, a flat object of strings, no duplicate keys."""
    if raw.startswith(codecs.BOM_UTF8):
        raise ValueError("starts with a UTF-8 byte-order mark")
    text = raw.decode("utf-8")

    def no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
        keys = [k for k, _ in pairs]
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        if dupes:
            raise ValueError(f"duplicate keys {dupes}")
        return dict(pairs)

    data = json.loads(text, object_pairs_hook=no_duplicates)
    if not isinstance(data, dict):
        raise ValueError("top level is not an object")
    bad = sorted(k for k, v in data.items() if not isinstance(v, str))
    if bad:
        raise ValueError(f"non-string values for {bad}")
    return data  # type: ignore[return-value]


def load(locale: str) -> dict[str, str]:
    return parse_catalog(read_bytes(locale))


# --------------------------------------------------------------------------- checks


def unit_keys(english: dict[str, str]) -> list[str]:
    return [k for k in english if k.endswith(UNIT_KEY_SUFFIXES)]


def key_problems(english: dict[str, str], other: dict[str, str]) -> list[str]:
    missing = [f"missing key {k}" for k in english if k not in other]
    extra = [f"extra key {k}" for k in other if k not in english]
    return missing + extra


def empty_problems(catalog: dict[str, str]) -> list[str]:
    return [f"empty value for {k}" for k, v in catalog.items() if not v.strip()]


def placeholder_problems(english: dict[str, str], other: dict[str, str]) -> list[str]:
    problems: list[str] = []
    for key, template in other.items():
        if key not in english:
            continue
        # As multisets: a placeholder written twice where en-US has it once (or
        # dropped in favour of another's repetition) is a different message.
        want = Counter(PLACEHOLDER.findall(english[key]))
        got = Counter(PLACEHOLDER.findall(template))
        if want != got:
            problems.append(
                f"{key}: placeholders {sorted(got.elements())} != en-US {sorted(want.elements())}"
            )
        if STRAY_BRACES.search(PLACEHOLDER.sub("", template)):
            problems.append(f"{key}: malformed placeholder in {template!r}")
    return problems


def casing_problems(value: str) -> list[str]:
    if value.casefold() in UNIT_SYMBOLS and value != value.casefold():
        return [f"unit symbol {value!r} must be lower-case ({value.casefold()!r})"]
    return []


def unit_problems(locale: str, english: dict[str, str], catalog: dict[str, str]) -> list[str]:
    problems: list[str] = []
    for key in unit_keys(english):
        value = catalog.get(key)
        if value is None:
            continue  # reported by key_problems
        kind = english[key]
        allowed = UNIT_KINDS[kind][locale]
        normal = unicodedata.normalize("NFC", value)
        if normal not in allowed:
            problems.append(
                f"{key}: {value!r} is not a {kind} label for {locale} {sorted(allowed)}"
            )
        problems += [f"{key}: {value!r} contains honorific {h!r}" for h in honorifics_in(value)]
        problems += [f"{key}: {p}" for p in casing_problems(value)]
    return problems


def all_problems(locale: str, english: dict[str, str], catalog: dict[str, str]) -> list[str]:
    return (
        key_problems(english, catalog)
        + empty_problems(catalog)
        + placeholder_problems(english, catalog)
        + unit_problems(locale, english, catalog)
    )


def _fmt(problems: Iterable[str]) -> str:
    return "\n  ".join(["", *problems])


@pytest.fixture(scope="module")
def english() -> dict[str, str]:
    return load(DEFAULT_LOCALE)


# --------------------------------------------------------------------------- the files


def test_all_expected_locales_are_shipped() -> None:
    shipped = {p.stem for p in LOCALES_DIR.glob("*.json")}
    assert shipped == EXPECTED_LOCALES
    assert set(locales.available_locales()) == EXPECTED_LOCALES


def test_allow_lists_cover_every_locale() -> None:
    for kind, table in UNIT_KINDS.items():
        assert set(table) == EXPECTED_LOCALES, kind


@pytest.mark.parametrize("locale", sorted(EXPECTED_LOCALES))
def test_file_is_strict_utf8_json_without_bom(locale: str) -> None:
    raw = read_bytes(locale)
    assert not raw.startswith(codecs.BOM_UTF8)
    parse_catalog(raw)  # raises on invalid UTF-8/JSON, duplicates, non-strings
    assert raw.endswith(b"\n"), "file should end with a newline"


def test_english_is_well_formed(english: dict[str, str]) -> None:
    assert empty_problems(english) == []
    assert placeholder_problems(english, english) == []
    for key in english:
        assert re.fullmatch(r"[a-z]+(\.[A-Za-z0-9]+)+", key), key
    units = unit_keys(english)
    assert "nodes.common.retry.ms" in units
    for key in units:
        assert english[key] in UNIT_KINDS, f"{key}: en-US unit {english[key]!r} has no allow-list"
    assert unit_problems(DEFAULT_LOCALE, english, english) == []


@pytest.mark.parametrize("locale", NON_ENGLISH)
def test_locale_has_exactly_the_english_keys(locale: str, english: dict[str, str]) -> None:
    problems = key_problems(english, load(locale))
    assert not problems, _fmt(problems)


@pytest.mark.parametrize("locale", NON_ENGLISH)
def test_locale_keeps_english_key_order(locale: str, english: dict[str, str]) -> None:
    catalog = load(locale)
    assert [k for k in catalog if k in english] == [k for k in english if k in catalog]


@pytest.mark.parametrize("locale", NON_ENGLISH)
def test_locale_has_no_empty_values(locale: str) -> None:
    problems = empty_problems(load(locale))
    assert not problems, _fmt(problems)


@pytest.mark.parametrize("locale", NON_ENGLISH)
def test_locale_keeps_placeholders(locale: str, english: dict[str, str]) -> None:
    problems = placeholder_problems(english, load(locale))
    assert not problems, _fmt(problems)


@pytest.mark.parametrize("locale", NON_ENGLISH)
def test_unit_keys_are_units(locale: str, english: dict[str, str]) -> None:
    problems = unit_problems(locale, english, load(locale))
    assert not problems, _fmt(problems)


@pytest.mark.parametrize("locale", NON_ENGLISH)
def test_locale_is_translated(locale: str, english: dict[str, str]) -> None:
    """Not English copied in: most sentences must differ from en-US."""
    catalog = load(locale)
    # Sentences of at least four words besides placeholders; a short label such
    # as 'node {{id}} "{{title}}"' may rightly stay as it is ("node" in id-ID).
    prose = [k for k in english if len(PLACEHOLDER.sub("", english[k]).split()) >= 4]
    copied = [k for k in prose if catalog.get(k) == english[k]]
    assert not copied, _fmt(copied)


# --------------------------------------------------------------------------- the checks have teeth


class TestChecksCatchMutations:
    """Each check, applied to a broken copy of a shipped catalog, reports the break."""

    def test_honorific_in_retry_unit(self, english: dict[str, str]) -> None:
        broken = dict(load("de-DE"), **{"nodes.common.retry.ms": "Frau"})
        assert any("honorific 'Frau'" in p for p in unit_problems("de-DE", english, broken))

    @pytest.mark.parametrize(
        ("locale", "value"),
        [
            ("es-ES", "Sra."),
            ("pt-BR", "Sra."),
            ("fr-FR", "Mme"),
            ("it-IT", "Sig.ra"),
            ("pl-PL", "Pani"),
            ("uk-UA", "пані"),
            ("ru-RU", "Госпожа"),
            ("tr-TR", "Bayan"),
            ("vi-VN", "Bà"),
            ("id-ID", "Nyonya"),
            ("ro-RO", "Doamna"),
            ("sl-SI", "Gospa"),
            ("nl-NL", "Mevrouw"),
            ("zh-Hans", "女士"),
            ("zh-Hant", "夫人"),
            ("ja-JP", "様"),
            ("ko-KR", "씨"),
            ("th-TH", "นาง"),
            ("hi-IN", "श्रीमती"),
            ("fa-IR", "خانم"),
            ("ar-TN", "السيدة"),
            ("en-US", "Mrs."),
            ("de-DE", "Ms."),
        ],
    )
    def test_known_honorific_mistranslations(
        self, locale: str, value: str, english: dict[str, str]
    ) -> None:
        broken = dict(load(locale), **{"nodes.common.retry.ms": value})
        problems = unit_problems(locale, english, broken)
        assert any("honorific" in p for p in problems), problems

    @pytest.mark.parametrize(
        ("locale", "value"), [("de-DE", "Ms"), ("en-US", "MS"), ("uk-UA", "Мс")]
    )
    def test_wrong_casing(self, locale: str, value: str, english: dict[str, str]) -> None:
        broken = dict(load(locale), **{"nodes.llm.gate.idleTimeout.unit": value})
        problems = unit_problems(locale, english, broken)
        assert any("lower-case" in p for p in problems), problems

    def test_word_that_is_not_a_unit(self, english: dict[str, str]) -> None:
        broken = dict(load("fr-FR"), **{"nodes.common.retry.ms": "fois"})
        assert unit_problems("fr-FR", english, broken)

    def test_deleted_key(self, english: dict[str, str]) -> None:
        broken = load("ja-JP")
        del broken["errors.idleTimeout"]
        assert key_problems(english, broken) == ["missing key errors.idleTimeout"]

    def test_extra_key(self, english: dict[str, str]) -> None:
        broken = dict(load("ja-JP"), **{"errors.typo": "x"})
        assert key_problems(english, broken) == ["extra key errors.typo"]

    def test_changed_placeholder(self, english: dict[str, str]) -> None:
        catalog = load("fr-FR")
        key = "errors.connect"
        broken = dict(catalog, **{key: catalog[key].replace("{{url}}", "{{uri}}")})
        assert any(p.startswith(key) for p in placeholder_problems(english, broken))

    def test_repeated_placeholder(self, english: dict[str, str]) -> None:
        # The set of names is unchanged; the message now says one of them twice.
        catalog = load("de-DE")
        key = "watchdog.fallback.sameHostSkip"
        broken = dict(catalog, **{key: catalog[key] + " ({{busy}})"})
        assert any(p.startswith(key) for p in placeholder_problems(english, broken))

    def test_malformed_placeholder(self, english: dict[str, str]) -> None:
        catalog = load("ko-KR")
        key = "cli.ttft"
        broken = dict(catalog, **{key: catalog[key].replace("{{seconds}}", "{seconds}")})
        assert placeholder_problems(english, broken)

    def test_empty_value(self) -> None:
        broken = dict(load("th-TH"), **{"cli.outputs": "  "})
        assert empty_problems(broken) == ["empty value for cli.outputs"]

    def test_bom_and_duplicates_rejected(self) -> None:
        raw = read_bytes("nl-NL")
        with pytest.raises(ValueError, match="byte-order mark"):
            parse_catalog(codecs.BOM_UTF8 + raw)
        with pytest.raises(ValueError, match="duplicate"):
            parse_catalog(b'{"cli.outputs": "a", "cli.outputs": "b"}')
        with pytest.raises(UnicodeDecodeError):
            parse_catalog('{"cli.outputs": "Ausgänge"}'.encode("latin-1"))

    def test_all_problems_is_clean_for_shipped_files(self, english: dict[str, str]) -> None:
        for locale in sorted(EXPECTED_LOCALES):
            assert all_problems(locale, english, load(locale)) == [], locale


# --------------------------------------------------------------------------- t()


def test_t_renders_placeholders() -> None:
    assert t("cli.ttft", "en-US", seconds=1.5) == "Time to first token: 1.5 s"
    assert t("cli.ttft", "de-DE", seconds=2) == "Zeit bis zum ersten Token: 2 s"


def test_t_leaves_unknown_placeholder_visible() -> None:
    assert t("cli.ttft", "en-US") == "Time to first token: {{seconds}} s"


def test_t_defaults_to_english() -> None:
    assert t("cli.outputs") == "Outputs"
    assert t("cli.outputs", None) == "Outputs"
    assert t("cli.outputs", "xx-XX") == "Outputs"


def test_t_falls_back_per_key(monkeypatch: pytest.MonkeyPatch) -> None:
    german = dict(locales.catalog("de-DE"))
    del german["cli.outputs"]
    german["cli.invalidInput"] = ""
    monkeypatch.setattr(locales, "catalog", lambda name: german if name == "de-DE" else load(name))
    assert t("cli.outputs", "de-DE") == "Outputs"
    assert t("cli.invalidInput", "de-DE", error="x") == "Invalid input: x"
    assert t("cli.status.succeeded", "de-DE") == "Ausführung erfolgreich"


def test_t_raises_for_key_missing_from_english() -> None:
    with pytest.raises(KeyError, match="no.such.key"):
        t("no.such.key")
    with pytest.raises(KeyError):
        t("no.such.key", "de-DE")


@pytest.mark.parametrize("locale", sorted(EXPECTED_LOCALES))
def test_t_renders_every_key_in_every_locale(locale: str, english: dict[str, str]) -> None:
    for key, template in english.items():
        params = {name: f"<{name}>" for name in PLACEHOLDER.findall(template)}
        out = t(key, locale, **params)
        assert "{{" not in out, (locale, key)
        for value in params.values():
            assert value in out, (locale, key, value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("de_DE.UTF-8", "de-DE"),
        ("de-de", "de-DE"),
        ("de", "de-DE"),
        ("de_AT", "de-DE"),
        ("uk_UA.UTF-8@euro", "uk-UA"),
        ("pt_PT", "pt-BR"),
        ("zh_CN.UTF-8", "zh-Hans"),
        ("zh-SG", "zh-Hans"),
        ("zh_TW.UTF-8", "zh-Hant"),
        ("zh-HK", "zh-Hant"),
        ("zh-Hant-TW", "zh-Hant"),
        ("ar_SA", "ar-TN"),
        ("C", "en-US"),
        ("POSIX", "en-US"),
        ("C.UTF-8", "en-US"),
        ("", "en-US"),
        (None, "en-US"),
        ("xx_YY", "en-US"),
    ],
)
def test_normalize_locale(value: str | None, expected: str) -> None:
    assert normalize_locale(value) == expected


def test_locale_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(var, raising=False)
    assert locales.locale_from_env() == "en-US"
    monkeypatch.setenv("LANG", "ja_JP.UTF-8")
    assert locales.locale_from_env() == "ja-JP"
    monkeypatch.setenv("LC_ALL", "fa_IR.UTF-8")
    assert locales.locale_from_env() == "fa-IR"


def test_catalog_only_reads_shipped_locales() -> None:
    assert locales.catalog("../pyproject") == {}
    assert locales.catalog("de-DE")["nodes.common.retry.ms"] == "ms"
