-- Remove consumers that are gone: idle longer than a bound and owning no
-- pending entry. One atomic step, so a consumer that reads an entry cannot be
-- removed (with its pending list) between the check and the removal.
-- Fencing epochs are kept: an epoch must never go back for a consumer name.
--
-- KEYS[1] stream  KEYS[2] last errors
-- ARGV[1] group   ARGV[2] min idle ms   ARGV[3] consumer to remove whatever its
-- idle time (this worker leaving), or ''
-- ARGV[4] the consumers' registrations' key, but for the name (see
--         register.lua): a consumer whose registration lives is a live
--         worker's, however idle Redis finds it (Redis 7.0 does not count a
--         blocked read that found nothing as activity), and stays. Those
--         keys are in the stream's slot.
-- Returns the names removed.

local removed = {}
local consumers = redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
for _, c in ipairs(consumers) do
    local info = {}
    for i = 1, #c, 2 do
        info[c[i]] = c[i + 1]
    end
    local leaving = info['name'] == ARGV[3]
    local gone = info['idle'] >= tonumber(ARGV[2])
        and redis.call('EXISTS', ARGV[4] .. info['name']) == 0
    if info['pending'] == 0 and (leaving or gone) then
        redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], info['name'])
        redis.call('HDEL', KEYS[2], info['name'])
        removed[#removed + 1] = info['name']
    end
end
return removed
