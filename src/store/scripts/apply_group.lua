-- Apply the chunks of several carries (sums) that fall in one hash slot,
-- each at most once: on a Redis Cluster a script touches one slot, and one
-- script per slot for every sum of a group (the carries of a process'
-- stream shards, see the Rust module `store::commit::group`) costs a
-- fraction of one per sum and slot.
--
-- KEYS[1] the group's applied marker in this slot (HASH, field
--         SUM:CHUNK -> failures)
-- KEYS[2..1+n] count:PREC:NAME hashes, one per cell, part after part
-- ARGV[1] marker TTL in seconds (a safety net: the worker shortens it once
--         every sum of the group is finished)
-- ARGV[2] deadline, as in apply.lua: unix seconds on the Redis clock before
--         which the members left out of the worker's ZADDs are surely in
--         known: (0 when none is left out)
-- ARGV[3] P, then per part: its marker field, its cell count
-- then per cell, part after part: bucket field, delta
--
-- A part already marked is left alone and reported with its recorded
-- failures, so a replay (a retry after a lost reply, a worker finishing
-- one sum of the group alone) never counts twice. A cell whose write fails
-- (wrong type, overflow) is left out and reported; the others are counted.
-- Past the deadline nothing is written: {-1, ''}.
-- Returns per part its status (1 applied now, 0 already) and its failures
-- ("cell_number<TAB>error" lines, numbered within the part), flattened.

local deadline = tonumber(ARGV[2])
if deadline > 0 and tonumber(redis.call('TIME')[1]) >= deadline then
    return {-1, ''}
end

local p = tonumber(ARGV[3])
local fields = {}
for i = 1, p do
    fields[i] = ARGV[2 + 2 * i]
end
local done = redis.call('HMGET', KEYS[1], unpack(fields))

local out, marks = {}, {}
local key, a = 2, 4 + 2 * p
for i = 1, p do
    local n = tonumber(ARGV[3 + 2 * i])
    if done[i] then
        out[#out + 1] = 0
        out[#out + 1] = done[i]
    else
        local failed = {}
        for j = 0, n - 1 do
            local r = redis.pcall('HINCRBY', KEYS[key + j], ARGV[a + 2 * j], ARGV[a + 2 * j + 1])
            if type(r) == 'table' and r.err then
                if string.sub(r.err, 1, 3) == 'OOM' then
                    return redis.error_reply(r.err)
                end
                failed[#failed + 1] = (j + 1) .. '\t' .. r.err
            end
        end
        local text = table.concat(failed, '\n')
        marks[#marks + 1] = fields[i]
        marks[#marks + 1] = text
        out[#out + 1] = 1
        out[#out + 1] = text
    end
    key = key + n
    a = a + 2 * n
end
if #marks > 0 then
    redis.call('HSET', KEYS[1], unpack(marks))
    redis.call('EXPIRE', KEYS[1], ARGV[1])
end
return out
