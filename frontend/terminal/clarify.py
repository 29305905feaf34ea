"""What `research answer ID` prints without answers: the questions a research's lead asked
before it started, each with its answer once given, and how to answer them while it waits."""

from research.models import Run


def question_lines(run: Run) -> list[str]:
    asked = run.clarification or {"questions": [], "answers": None}
    if not asked["questions"]:
        return [f"research {run.pk} asked no questions."]
    answers = asked["answers"] or []
    lines = [
        f"{number}\t{question}" + (f"\t{answers[number - 1]}" if number <= len(answers) else "")
        for number, question in enumerate(asked["questions"], start=1)
    ]
    if asked["answers"] is None:
        lines.append(f"answer them: manage.py research answer {run.pk} TEXT ... (or --skip)")
    return [line.rstrip("\t") for line in lines]
