-- Claim entries that other consumers left pending too long, fencing them.
--
-- KEYS[1] stream  KEYS[2] epochs  KEYS[3] dead-letter stream  KEYS[4] last errors
-- ARGV[1] group   ARGV[2] this consumer   ARGV[3] min idle ms   ARGV[4] max entries
-- ARGV[5] max deliveries   ARGV[6] dead MAXLEN
-- KEYS[5] windows (ZSET of recorded windows)   ARGV[7] prefix of a window's record key
--
-- Entries of a consumer that has a recorded, unfinished window are left alone:
-- that window may hold them (committed, not yet acknowledged). Recovery
-- finishes such a window first (acknowledging its entries); what is still
-- pending afterwards was never counted and can be claimed.
-- Every consumer that loses entries gets its epoch bumped in the same atomic
-- step, so a stalled owner can no longer commit a window holding them.
-- An entry already delivered max-deliveries times is dead-lettered with its
-- delivery count and its owner's last error, and acknowledged.
-- Returns {claimed entries as XCLAIM returns them, number dead-lettered}.
--
-- Bounded work whatever the pending lists hold (a worker behind keeps up to
-- millions of entries pending while it sums them; a filtered XPENDING IDLE
-- walks a whole list when nothing in it is idle, ~10 ms a million): this
-- consumer's own list is never looked at, and of each other consumer's list
-- only the oldest ARGV[4] entries, and only when its oldest is idle. A
-- consumer that dies or stalls keeps every entry it holds, each delivered
-- before it stopped, so all of them, its oldest among them, are idle within
-- the claim time of its stop: nothing is left behind. (Only an entry idle
-- while an older-id one of the same consumer is not, which a claim makes,
-- waits until that one is idle too: at most the claim time.)

local stream, group, me = KEYS[1], ARGV[1], ARGV[2]
local idle, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local summary = redis.call('XPENDING', stream, group)
if summary[1] == 0 then
    return {{}, 0}
end
local busy = {}
for _, w in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
    local owner = redis.call('HGET', ARGV[7] .. w, 'owner')
    if owner then
        busy[owner] = true
    end
end
-- Each entry as XPENDING's extended form gives it: {id, owner, idle ms, deliveries}.
local pending = {}
for _, c in ipairs(summary[4]) do
    local owner = c[1]
    local room = limit - #pending
    if room > 0 and owner ~= me and not busy[owner] then
        local oldest = redis.call('XPENDING', stream, group, '-', '+', 1, owner)[1]
        if oldest and oldest[3] >= idle then
            for _, p in ipairs(redis.call('XPENDING', stream, group, '-', '+', room, owner)) do
                if p[3] >= idle then
                    pending[#pending + 1] = p
                end
            end
        end
    end
end
local take, owners, poisoned = {}, {}, 0
for _, p in ipairs(pending) do
    local id, owner, deliveries = p[1], p[2], tonumber(p[4])
    owners[owner] = true
    if deliveries >= tonumber(ARGV[5]) then
        local entry = redis.call('XRANGE', stream, id, id)
        local args = {'MAXLEN', '~', ARGV[6], '*', 'reason', 'max_deliveries', 'id', id,
            'deliveries', deliveries, 'consumer', owner,
            'error', redis.call('HGET', KEYS[4], owner) or 'worker stopped without an error'}
        if entry[1] then
            for _, v in ipairs(entry[1][2]) do
                args[#args + 1] = v
            end
        end
        redis.call('XADD', KEYS[3], unpack(args))
        redis.call('XACK', stream, group, id)
        poisoned = poisoned + 1
    else
        take[#take + 1] = id
    end
end
for owner in pairs(owners) do
    redis.call('HINCRBY', KEYS[2], owner, 1)
end
local claimed = {}
if #take > 0 then
    claimed = redis.call('XCLAIM', stream, group, me, ARGV[3], unpack(take))
end
return {claimed, poisoned}
