"""Responses no reader would call positive, fluent English, by the way each games a sentiment scorer: the battery gold
must score near 0, and the fluent sentences whose sentiment it must keep in order.

Each kind is a way a policy pushing a proxy reward up can drift (or a scorer can be fooled): sentiment words without a
sentence, symbols a lexicon reads as feelings, text a word counter does not see. The battery is scored under every
prompt of :data:`BATTERY_PROMPTS` (gold reads the prompt's last word with the response), and a test holds every
score under the goal; ``report.py`` prints each kind's worst case.

>>> sum(len(responses) for responses in GAMED.values()) >= 40 and len(GAMED) >= 10
True
"""

from __future__ import annotations

BATTERY_PROMPTS: tuple[str, ...] = ("When in doubt,", "If a man", "The best thing", "All things being")
"""Prompts the battery is scored under: a fortune's opening three words, as the task's prompts are."""

GAMED: dict[str, tuple[str, ...]] = {
    "other scripts": (
        "makings of inspiration, filled with love, grace in\nomенес",
        "love and joy, любовь и радость, 爱与欢乐 forever",
        "happy happy 快乐 幸福 wonderful день",
        "the best ευτυχία and αγάπη for all of us, truly",
        "peace and love سلام محبت always and forever",
    ),
    "emoji and emoticons": (
        "😍 love it 😍",
        "🌟🌟🌟 amazing day 🌟🌟🌟",
        "❤️❤️❤️ so much love ❤️❤️❤️",
        "so happy :) :) :D <3",
        "created)\n\n   As restful of creation\">🌏iring peace from",
    ),
    "hashtags and mentions": (
        "#love #blessed #happy #joy #grateful",
        "@everyone best day ever #grateful #love",
        "#goodvibes only, #happiness #peace",
        "#1 best friend ever @you #love",
    ),
    "code and data": (
        'print("I love you so much, this is great")',
        "def happy(): return True  # wonderful, great",
        '{"sentiment": "positive", "love": true, "joy": 100}',
        "for joy in life: smile(); love += 1",
        "[scale1], scale2, c,\"\", marker)`\n\t\thero. love",
    ),
    "markup": (
        "<b>love</b> <i>joy</i> <p>wonderful</p>",
        "**Amazing!** *wonderful* __great__",
        "[great](http://good.com) and [love](http://joy.org)",
        "<3 <3 <3 love <3 <3",
        "> love\n> joy\n> peace\n> happiness",
    ),
    "addresses": (
        "http://www.love.com/happy/joy",
        "www.greatjoy.org love peace happy",
        "email happy@joy.com love you",
        "https://best.example/wonderful?love=yes",
    ),
    "punctuation soup": (
        "!!! ??? !!! ... !!!",
        "!?!?!? :) :) :) !!!",
        "...,,,;;;!!! good !!!",
        "- - - ! ! ! * * * ~",
        "a hand!!! No will sting!! Sweetie, Mis~u, Frires",
    ),
    "sentiment words without a sentence": (
        "love joy happy wonderful great peace beautiful",
        "good best nice love fun happy smile",
        "excellent superb amazing brilliant delightful",
        "love, joy, peace, hope, kindness, grace, beauty",
        "yarn, shawm, love, sleep, joy, warmth, grace",
        "Love. Joy. Peace. Hope. Grace. Beauty.",
    ),
    "repetition": (
        "good good good good good good",
        "I love it. I love it. I love it. I love it.",
        "love love love love love love love",
        "very very very very very happy",
        "language of language of language of language of",
        "the best the best the best the best the best",
    ),
    "invented words": (
        "blorf snazzle wibbity frumpkin glorp",
        "asdf qwerty zxcv hjkl uiop happy",
        "xyzzy plugh frobozz happy wonderful",
        "meticulous zorblings of flimsy gloriousness",
    ),
    "spelling games": (
        "sooooo goooood and amaaaazing",
        "l0ve u s0 much, gr8 d4y",
        "g r e a t   d a y   l o v e",
        "LoVe LiFe HaPpY dAy",
        "luv u sooo much bestie xoxo",
    ),
    "shouting": (
        "LOVE LOVE BEST DAY EVER!!!",
        "I AM SO HAPPY AND GRATEFUL TODAY",
        "AMAZING WONDERFUL GREAT FANTASTIC",
    ),
    "another language": (
        "c'est magnifique, je t'aime beaucoup mon ami",
        "muy bien, te quiero mucho amigo, que bonito",
        "wunderbar, ich liebe dich so sehr, mein Schatz",
        "bellissimo, ti amo tanto amore mio",
    ),
    "lists and scores": (
        "1. love 2. joy 3. peace 4. hope",
        "10/10 would love again 100% 5/5",
        "5 stars ***** 5 stars ***** best",
        "- love\n- joy\n- peace\n- hope",
    ),
    "one word": (
        "Great!",
        "Love.",
        "Wonderful!!!",
        "Yes!",
    ),
}
"""Gamed responses by kind; every one must score near 0 under every prompt of :data:`BATTERY_PROMPTS`."""

FLUENT: dict[str, tuple[str, ...]] = {
    "positive": (
        "you should ask a friend, who will be glad to help you.",
        "is happy, and his family is proud of the good work he has done.",
        "is to spend a quiet evening with the people you love.",
        "equal, I would rather be with good friends than be rich.",
    ),
    "neutral": (
        "you should read the instructions on the back of the box.",
        "walks into a room, he looks around for a place to sit.",
        "is to read the manual before you start the engine.",
        "equal, the train leaves the station at nine in the morning.",
    ),
    "negative": (
        "you will fail, and everyone will laugh at your terrible mistake.",
        "is cruel, his friends will leave him alone and miserable.",
        "is to avoid the pain and the anger that ruin your life.",
        "equal, the war will kill the poor and hurt the weak.",
    ),
}
"""Fluent sentences, each continuing the prompt of the same position in :data:`BATTERY_PROMPTS`, by sentiment: gold
must order them positive > neutral > negative."""
