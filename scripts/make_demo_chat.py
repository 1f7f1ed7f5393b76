#!/usr/bin/env python3
"""make_demo_chat.py: the built-in demo's chat data, made from the State of the Union addresses of 2010-2021
(examples/data/sotu-2010s.jsonl, public domain): each paragraph that speaks of one of a list of topics becomes a
conversation in which a user asks the President about that topic and the assistant answers with the paragraph.
A small instruct model asked such a question answers as a chatbot; after a short LoRA run on these it answers in
the voice of the addresses, a change a reader sees in one answer. Every tenth conversation goes to the eval file.
Deterministic: the same input gives the same files.

    python3 scripts/make_demo_chat.py   (writes examples/data/sotu-chat.jsonl and sotu-chat-eval.jsonl)
"""
import json
import os
import re

TOPICS = ["jobs", "the economy", "families", "workers", "energy", "education", "college", "the military",
          "the deficit", "schools", "immigration", "trade", "democracy", "infrastructure", "manufacturing",
          "health care", "wages", "taxes", "veterans", "climate change", "innovation", "Medicare", "terrorism",
          "Social Security"]
QUESTIONS = ["Mr. President, what is your message to the nation on {t}?", "What will you do about {t}?",
             "Tell Congress where you stand on {t}.", "What do you want Americans to know about {t}?"]


def main():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "data")
    paragraphs = [json.loads(line)["text"] for line in open(os.path.join(here, "sotu-2010s.jsonl"))]
    convs = []
    for p in paragraphs:
        if not 150 <= len(p) <= 900:
            continue
        for t in TOPICS:
            word = t[4:] if t.startswith("the ") else t
            word = "climate" if t == "climate change" else word
            if re.search(r"\b" + re.escape(word) + r"\b", p, re.IGNORECASE):
                q = QUESTIONS[len(convs) % len(QUESTIONS)].format(t=t)
                convs.append({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": p}]})
                break
    train = [c for i, c in enumerate(convs) if i % 10 != 9]
    evals = [c for i, c in enumerate(convs) if i % 10 == 9]
    for name, rows in [("sotu-chat.jsonl", train), ("sotu-chat-eval.jsonl", evals)]:
        with open(os.path.join(here, name), "w") as f:
            for c in rows:
                f.write(json.dumps(c, ensure_ascii=False) + "\n")
    print(f"make_demo_chat: {len(train)} train and {len(evals)} eval conversations")


if __name__ == "__main__":
    main()
