"""A second implementation of the constrained search (dynamic beam allocation, Post and Vilar 2018), written for the
tests: one sentence at a time in plain Python, no cache, the decoder recomputed for every hypothesis at every step,
and a hypothesis's standing against its phrases read from its tokens (does it hold the phrase, which endings begin
one), never tracked step by step as the package does. Its rules are those `search_vaswani.beam_search` and
`constraints_vaswani.DynamicBeamAllocation` state:

- a hypothesis that does not hold all its phrases may not end (</s> ruled out), but its length limit ends it;
- the candidates: the 2k likeliest continuations of the k live hypotheses (by log P), then, where the sentence has
  phrases, for each live hypothesis in turn, its likeliest token and each token that takes it further through a
  phrase, in token order, leaving out those already there;
- of the first k, those that end join the finished ones, and so does every candidate that ends holding all its
  sentence's phrases (where it has any): those holding every phrase rank first, then by log P / lp(Y);
- the k that live on are chosen among those that do not end by banks (constraint tokens met): k // (C + 1) places
  a bank, one more for the highest k % (C + 1) banks, each bank's likeliest first, places left going to the other
  banks' next likeliest in turns from the highest bank down;
- a sentence ends when its k finished hypotheses all hold their phrases and no live one can beat the k-th, even at
  its longest length allowed."""

from helpers.reference_search import EOS, lp, next_log_probs


def holds(tokens: list[int], phrase: list[int]) -> bool:
    return any(tokens[i : i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


def begun(tokens: list[int], phrase: list[int]) -> list[int]:
    """The lengths m (0 included, the phrase itself not) for which `tokens` ends with the phrase's first m tokens."""
    return [m for m in range(len(phrase)) if m == 0 or tokens[-m:] == phrase[:m]]


def met_tokens(tokens: list[int], phrases: list[list[int]]) -> int:
    unmet = [phrase for phrase in phrases if not holds(tokens, phrase)]
    whole = sum(len(phrase) for phrase in phrases if holds(tokens, phrase))
    return whole + max((max(begun(tokens, phrase)) for phrase in unmet), default=0)


def advancing(tokens: list[int], phrases: list[list[int]]) -> set[int]:
    return {phrase[m] for phrase in phrases if not holds(tokens, phrase) for m in begun(tokens, phrase)}


def allocate(candidates: list[tuple], k: int, top_bank: int) -> list[tuple]:
    """candidates: (log P, bank, ...) in candidate order; the k chosen, likeliest first."""
    banks = {
        bank: [c for c in sorted(candidates, key=lambda c: -c[0]) if c[1] == bank] for bank in range(top_bank + 1)
    }
    chosen = []
    for bank in range(top_bank, -1, -1):
        places = k // (top_bank + 1) + (1 if bank > top_bank - k % (top_bank + 1) else 0)
        chosen += banks[bank][:places]
        banks[bank] = banks[bank][places:]
    while len(chosen) < k and any(banks.values()):
        for bank in range(top_bank, -1, -1):
            if len(chosen) < k and banks[bank]:
                chosen.append(banks[bank].pop(0))
    return sorted(chosen, key=lambda c: -c[0])


def constrained_search(model, source, phrases, beams, alpha, limit, returned, processor=None):
    """The constrained search over one sentence; `limit` counts output tokens. Returns the `returned` best (output
    tokens, score), best first."""
    top_bank = sum(map(len, phrases))
    live = [([], 0.0)]
    finished = []  # (holds all, score, tokens)
    while live:
        next_scores = next_log_probs(model, source, [tokens for tokens, _ in live], processor)
        for (tokens, _), scores in zip(live, next_scores, strict=True):
            if not all(holds(tokens, phrase) for phrase in phrases):
                scores[EOS] = float("-inf")
        continuations = [
            (log_p + token_log_p, rank, token)
            for rank, ((tokens, log_p), scores) in enumerate(zip(live, next_scores, strict=True))
            for token, token_log_p in enumerate(scores)
        ]
        continuations.sort(key=lambda c: (-c[0], c[1], c[2]))
        candidates = continuations[: 2 * beams]
        seen = {(rank, token) for _, rank, token in candidates}
        for rank, ((tokens, log_p), scores) in enumerate(zip(live, next_scores, strict=True)):
            if not phrases:  # a sentence without phrases searches as without constraints
                break
            best = max(range(len(scores)), key=lambda t: (scores[t], -t))
            for token in sorted({best, *advancing(tokens, phrases)}):
                if (rank, token) not in seen:
                    seen.add((rank, token))
                    candidates.append((log_p + scores[token], rank, token))
        growing = []
        for place, (log_p, rank, token) in enumerate(candidates):
            tokens = live[rank][0] + [token]
            if token == EOS or len(tokens) == limit:
                ok = all(holds(tokens, phrase) for phrase in phrases)
                if (place < beams or (phrases and ok)) and log_p > float("-inf"):
                    finished.append((ok, log_p / lp(len(tokens), alpha), tokens))
            elif log_p > float("-inf"):
                growing.append((log_p, min(met_tokens(tokens, phrases), top_bank), tokens))
        finished = sorted(finished, key=lambda f: (not f[0], -f[1]))[:beams]
        live = [(tokens, log_p) for log_p, _, tokens in allocate(growing, beams, top_bank)]
        counted = [f for f in finished if f[0]]
        if len(counted) == beams and live and live[0][1] / lp(limit, alpha) <= counted[-1][1]:
            break
    return [(tokens, score) for _, score, tokens in finished[:returned]]
