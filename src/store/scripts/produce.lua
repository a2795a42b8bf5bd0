-- Append a producer's batch of hit events, at most once and in order.
--
-- KEYS[1] stream   KEYS[2] this producer's last batch number (expires)
-- ARGV[1] batch number (1, 2, 3... per producer)   ARGV[2] TTL of KEYS[2] in s
-- ARGV[3] the last batch number the producer saw appended (0 at first)
-- ARGV[4..] MessagePack hit events
--
-- A retried batch (the reply was lost, the connection cut) is recognised by
-- its number and not appended again. A batch that does not follow the last
-- one appended is refused, so a pipeline whose earlier batch failed (say
-- NOSCRIPT before the scripts were loaded) never lets a later one through
-- (the producer then retries both, in order). When Redis remembers no number
-- (the first batch, or after a quiet spell longer than the TTL), the
-- producer's own record of what was appended says which batch comes next.
-- Returns the entries appended.

local last = redis.call('GET', KEYS[2])
local no = tonumber(ARGV[1])
local expected
if last then
    last = tonumber(last)
    if no <= last then
        return 0
    end
    expected = last + 1
else
    expected = tonumber(ARGV[3]) + 1
end
if no ~= expected then
    return redis.error_reply('ERR batch ' .. no .. ' does not follow batch ' .. (expected - 1) ..
        ': an earlier batch failed')
end
for i = 4, #ARGV do
    redis.call('XADD', KEYS[1], '*', 'hit', ARGV[i])
end
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
return #ARGV - 3
