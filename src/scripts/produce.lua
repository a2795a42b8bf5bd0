-- Append a producer's batch of hit events, at most once and in order.
--
-- KEYS[1] stream   KEYS[2] this producer's last batch number (expires)
-- ARGV[1] batch number (1, 2, 3... per producer)   ARGV[2] TTL of KEYS[2] in s
-- ARGV[3..] MessagePack hit events
--
-- A retried batch (the reply was lost, the connection cut) is recognised by
-- its number and not appended again. A batch that skips a number is refused,
-- so a pipeline whose earlier batch failed never lets a later one through
-- (the producer then retries both, in order). Returns the entries appended.

local last = redis.call('GET', KEYS[2])
local no = tonumber(ARGV[1])
if last then
    last = tonumber(last)
    if no <= last then
        return 0
    end
    if no ~= last + 1 then
        return redis.error_reply('ERR batch ' .. no .. ' follows ' .. last .. ': an earlier batch failed')
    end
end
for i = 3, #ARGV do
    redis.call('XADD', KEYS[1], '*', 'hit', ARGV[i])
end
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
return #ARGV - 2
