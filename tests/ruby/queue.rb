# ruby queue.rb <redis-url> <queue>: reads the first job of a queue with
# Sidekiq's API and prints its klass, args, jid, raw enqueued_at (with its Ruby
# class), the Time Sidekiq makes of it, and the queue's size and latency.
require_relative 'common'

queue = Sidekiq::Queue.new(ARGV[1] || 'default')
job = queue.first
abort("queue #{queue.name} is empty") if job.nil?
puts JSON.generate(
  'size' => queue.size,
  'klass' => job.klass,
  'args' => job.args,
  'jid' => job.jid,
  'enqueued_at' => job['enqueued_at'],
  'enqueued_at_class' => job['enqueued_at'].class.name,
  'enqueued_at_time' => job.enqueued_at&.to_f,
  'now' => Time.now.to_f,
  'latency' => queue.latency
)
