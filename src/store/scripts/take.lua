-- Take a recorded window for applying it on its owner's behalf (recovery,
-- or its own worker after a resync), unless the carry took its cells first.
-- One key, in the stream's slot.
--
-- KEYS[1] the window's record
--
-- The carry (carry.lua) moves a waiting window's cells into a sum of its
-- own; whoever finishes the window must then apply none of them. It does
-- so only for windows nobody took, and this script takes a window only if
-- the carry has not: the two are atomic in the record's slot, so each cell
-- is applied through its window or through the sum, never both, even on a
-- Redis Cluster, where the window's applied markers are in other slots.
-- Taking twice is harmless (a second recovery finishes what the first
-- began, under the same markers).
-- Returns {'gone', ''} (finished meanwhile), {'carried', sum id} or
-- {'ok', ''}.

if redis.call('EXISTS', KEYS[1]) == 0 then
    return {'gone', ''}
end
local carried = redis.call('HGET', KEYS[1], 'carried')
if carried then
    return {'carried', carried}
end
redis.call('HSET', KEYS[1], 'taken', '1')
return {'ok', ''}
