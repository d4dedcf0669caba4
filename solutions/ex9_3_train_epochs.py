def train_epochs(ddp_model, optimizer, dataset, epochs, batch_size):
    """Train for `epochs` epochs on this rank's share of `dataset`; return the loss log.

    Two fixes: (1) sampler.set_epoch(epoch) before each epoch, else every epoch visits the
    samples in the same order; (2) the logged loss is all-reduced -- on EVERY rank, since a
    collective that only rank 0 calls waits forever -- and divided by the world size.
    """
    from torch.utils.data import DataLoader, DistributedSampler

    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    log = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp_model(x), y)
            loss.backward()
            optimizer.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)  # SUM over ranks (every rank calls it)
            log.append(mean.item() / dist.get_world_size())
    return log
