def train_epochs(ddp_model, optimizer, dataset, epochs, batch_size):
    """Train for `epochs` epochs on this rank's share of `dataset`; return the loss log.

    The log has one entry per step: the mean loss over ALL ranks' samples of that step.
    """
    from torch.utils.data import DataLoader, DistributedSampler

    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    log = []
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp_model(x), y)
            loss.backward()
            optimizer.step()
            log.append(loss.item())
    return log
