from __future__ import annotations

import time

import pytest

from shortterm import ConfigError
from shortterm.intent import has_long_term_intent, normalize, packs_for
from shortterm.intent.matcher import compile_packs
from shortterm.intent.packs import PACKS, Pack

INTENT = {
    "en": [
        "please remember my birthday",
        "don’t forget that I'm vegan",  # curly apostrophe
        "Don‘t forget: the wifi password is hunter2",
        "DO NOT FORGET my cat's name",
        "Remember: I hate mushrooms",
        "Tomo, remember my sister is called Ana",
        "<@123> remember that I moved to Lisbon",
        "ok. remember I work nights",
        "- remember to use metric units with me",
        "for future reference, I use vim",
        "can you commit this to memory?",
        "make sure you don't forget my name",
        "I want you to remember this",
        "keep this in mind for the future please",
        "Never forget that I am allergic to nuts",
        "please\n\nremember my name",
        "save this to your memory: I am left-handed",
    ],
    "ja": [
        "これを覚えておいて",
        "私の誕生日、覚えてね",
        "忘れないでね",
        "メモしといて",
        "覚えてほしい",
    ],
    "zh-CN": ["请记住我的生日", "帮我记一下这个", "别忘了我下周考试", "你要记住我喜欢猫"],
    "zh-TW": ["請記住我的生日", "別忘了我下週要考試", "記住我喜歡貓"],
    "pt-BR": [
        "Lembre-se disso: sou vegano",
        "não se esqueça do meu aniversário",
        "nao esquece que eu moro em Recife",
        "por favor, lembre que sou alérgico",
        "anota aí: meu time é o Bahia",
    ],
    "es-419": [
        "No olvides que soy alérgico",
        "Recuerda que trabajo de noche",
        "¡Recuerda esto!",
        "acuérdate de esto, porfa",
        "para futuras conversaciones: me llamo Leo",
    ],
    "vi": [
        "hãy nhớ sinh nhật của tôi",
        "đừng quên tên con mèo của tôi",
        "nho ky nhe",
        "nhớ là tôi ăn chay",
    ],
}

NOT_INTENT = {
    "en": [
        "check my notebook",
        "do you remember what we said?",
        "I don't remember",
        "I can't remember his name",
        "remember when we went to the beach?",
        "Remember the time we got lost?",
        "remember me?",
        "I'll remember this forever",
        "I don't forget faces",
        "I remember that",
        "I also remember that day",
        "note the notebook",
        "Note that the API changed",
        "I need to memorize this poem",
        "that was memorable",
        "a reminder app",
        "what's the forgetting curve?",
        "",
        "   ",
    ],
    "ja": [
        "これを覚えてる？",
        "覚えてない",
        "覚えていますか",
        "メモしてる",
        "記憶している",
        "覚えてくれてありがとう",
    ],
    "zh-CN": ["你还记得吗", "我记住了", "记住了吗", "我没记住", "我记一下"],
    "zh-TW": ["你還記得嗎", "我記住了", "我沒記住"],
    "pt-BR": [
        "você lembra disso?",
        "Lembra quando fomos à praia?",
        "ele não esquece nada",
        "eu lembro",
    ],
    "es-419": ["¿Recuerdas cuando fuimos?", "Ella recuerda todo", "recuerda cuando era niño"],
    "vi": ["tôi nhớ bạn", "bạn có nhớ không", "một ngày đáng ghi nhớ"],
}


@pytest.mark.parametrize(
    ("locale", "text"), [(loc, t) for loc, texts in INTENT.items() for t in texts]
)
def test_explicit_intent_is_detected(locale: str, text: str) -> None:
    assert has_long_term_intent(text, locale)
    assert has_long_term_intent(text)  # every pack applies without a locale


@pytest.mark.parametrize(
    ("locale", "text"), [(loc, t) for loc, texts in NOT_INTENT.items() for t in texts]
)
def test_recall_questions_and_statements_are_not_intent(locale: str, text: str) -> None:
    assert not has_long_term_intent(text, locale)
    assert not has_long_term_intent(text)


def test_a_locale_applies_its_own_pack_and_english() -> None:
    assert has_long_term_intent("これを覚えておいて", "ja")
    assert not has_long_term_intent("これを覚えておいて", "pt-BR")
    assert has_long_term_intent("please remember this", "ja")  # English always applies
    assert not has_long_term_intent("No olvides que soy alérgico", "vi")


@pytest.mark.parametrize(
    ("locale", "packs"),
    [
        (None, tuple(PACKS)),
        ("en-GB", ("en",)),
        ("ja", ("ja", "en")),
        ("ja-JP", ("ja", "en")),
        ("pt-BR", ("pt-BR", "en")),
        ("pt", ("pt-BR", "en")),
        ("pt_PT", ("pt-BR", "en")),
        ("zh-CN", ("zh-Hans", "en")),
        ("zh-Hans", ("zh-Hans", "en")),
        ("zh-Hans-SG", ("zh-Hans", "en")),
        ("zh-TW", ("zh-Hant", "en")),
        ("zh-Hant", ("zh-Hant", "en")),
        ("zh-HK", ("zh-Hant", "en")),
        ("zh", ("zh-Hans", "zh-Hant", "en")),
        ("es", ("es", "en")),
        ("es-419", ("es", "en")),
        ("vi", ("vi", "en")),
        ("fr", tuple(PACKS)),  # no French pack: the user may write in any language we know
    ],
)
def test_locale_mapping(locale: str | None, packs: tuple[str, ...]) -> None:
    assert packs_for(locale) == packs


def test_normalization_folds_width_case_quotes_and_spaces() -> None:
    assert normalize("  ＤＯＮ’Ｔ\u00a0\u00a0Forget\t this  ") == "don't forget this"
    assert normalize("a \n\n b") == "a\nb"
    assert has_long_term_intent("ＰＬＥＡＳＥ　ＲＥＭＥＭＢＥＲ")  # full-width letters and space


@pytest.mark.parametrize(
    ("pack", "complaint"),
    [
        (Pack("xx", phrases=("",)), "empty phrase"),
        (Pack("xx", phrases=("remember.*",)), "regular-expression syntax"),
        (Pack("xx", phrases=("(note)",)), "regular-expression syntax"),
        (Pack("xx", phrases=("Remember",)), "normalized"),
        (Pack("xx", phrases=("don’t",)), "normalized"),
        (Pack("xx", phrases=("記",)), "at least 2 characters"),
        (Pack("xx", phrases=("ok",), blockers=("a|b",)), "regular-expression syntax"),
        (Pack("xx", phrases=("ok",), leading=("覚えて",)), "spaced scripts"),
        (Pack("xx", phrases=("ok",), exceptions=("ok",)), "both phrases and exceptions"),
    ],
)
def test_packs_are_validated_at_load(pack: Pack, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint):
        compile_packs([pack])


def test_every_shipped_pack_compiles() -> None:
    for locale in PACKS:
        assert len(compile_packs([PACKS[locale]]).compile()) == 2


def test_long_messages_are_searched_in_bounded_time() -> None:
    spaced = ("lorem ipsum remembered notebooks forgetful notes " * 400)[:20_000]
    cjk = ("私はこれを覚えてるけど、あなたは覚えてない。" * 1000)[:20_000]
    has_long_term_intent("warm up")
    started = time.perf_counter()
    assert not has_long_term_intent(spaced)
    assert not has_long_term_intent(cjk)
    assert has_long_term_intent(spaced + " please remember this")
    # A per-phrase scan would be ~400 phrases x 20,000 positions; the tries keep it to ms.
    assert time.perf_counter() - started < 1.0
