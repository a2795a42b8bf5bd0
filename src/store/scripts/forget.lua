-- On a cluster: remove from known: the members whose hashes the cleaner
-- found empty, noting each in a journal, as the leader (fenced).
--
-- KEYS[1] the fence key of known:'s slot   KEYS[2] known:
-- KEYS[3] the journal: a SET of members removed but not yet re-checked
-- ARGV[1] the fence (see fence.lua), ARGV[2..] members (PREC:NAME)
--
-- known: lives in another hash slot than the hashes, so "the hash is empty"
-- was seen by an earlier script, and a worker may have written since. The
-- caller re-checks each removed member's hash after this call and adds it
-- back if it exists again; the journal makes that re-check survive the
-- leader's death (the next pass re-checks what the journal still holds).
-- Called with no members, it only moves the slot's fence to this epoch.
-- Returns the members removed, or -1 when fenced out.

if not fenced(KEYS[1], ARGV[1]) then
    return -1
end
local removed = {}
for i = 2, #ARGV do
    if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then
        redis.call('SADD', KEYS[3], ARGV[i])
        removed[#removed + 1] = ARGV[i]
    end
end
return removed
